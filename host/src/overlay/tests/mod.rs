//! Unit tests: the real H200 and virtio config spaces (real_devices.rs) and
//! crafted ones (crafted.rs).

mod crafted;
mod real_devices;

use std::path::PathBuf;
use std::process::Command;

use p2p_topology::Clique;

use super::{ConfigOverlay, PhysicalConfig};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// The full 4096-byte config space of the first H200 (00:06.0) in the
/// passthrough-guest fixture, straight out of its sysfs.tgz.
fn h200_config() -> Vec<u8> {
    let tgz = fixtures().join("h200x2-passthrough-guest/sysfs.tgz");
    let out = Command::new("tar")
        .arg("xzOf")
        .arg(&tgz)
        .arg("sysfs/devices/pci0000:00/0000:00:06.0/config")
        .output()
        .expect("tar runs");
    assert!(out.status.success(), "tar xzOf {} failed", tgz.display());
    assert_eq!(out.stdout.len(), 4096, "the H200's config is 4 KiB");
    out.stdout
}

/// Config space of function `00:0N.0` of the Firecracker development VM.
fn firecracker_config(dev: u8) -> Vec<u8> {
    let p = fixtures().join(format!(
        "dev-vm-firecracker/sysfs/devices/pci0000:00/0000:00:{dev:02x}.0/config"
    ));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn clique(n: u8) -> Clique {
    Clique::new(n).unwrap()
}

/// A 256-byte NVIDIA 3D controller whose 0x34 list holds `caps` in this order:
/// (offset, id, bytes from +2 on).
fn space(caps: &[(u8, u8, &[u8])]) -> Vec<u8> {
    let mut b = vec![0u8; 256];
    b[0..2].copy_from_slice(&0x10de_u16.to_le_bytes());
    b[2..4].copy_from_slice(&0x2335_u16.to_le_bytes());
    b[0x0a] = 0x02;
    b[0x0b] = 0x03;
    if !caps.is_empty() {
        b[0x06] = 0x10;
    }
    let mut prev = 0x34;
    for &(off, id, body) in caps {
        let o = usize::from(off);
        b[prev] = off;
        b[o] = id;
        b[o + 2..o + 2 + body.len()].copy_from_slice(body);
        prev = o + 1;
    }
    b
}

/// Every byte of the overlay's virtual config, as a guest reads it.
fn read_all<P: PhysicalConfig>(o: &ConfigOverlay<P>, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    o.read(0, &mut v).unwrap();
    v
}

/// `physical` with the overlay's patches applied.
fn patched<P: PhysicalConfig>(o: &ConfigOverlay<P>, physical: &[u8]) -> Vec<u8> {
    let mut v = physical.to_vec();
    o.apply_to(&mut v);
    v
}
