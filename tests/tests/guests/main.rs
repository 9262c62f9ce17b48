//! One test binary for real guest kernels under QEMU: the capability and the
//! mirrored tree reaching the guest, the captured fixtures booted again, and
//! the .debs installed and booted.
//! Each module was a test binary of its own; they share one link here.

mod e2e_injection;
mod e2e_mirror;
mod packages;
mod packages_boot;
mod qemu_boot;
mod qemu_fixtures;
