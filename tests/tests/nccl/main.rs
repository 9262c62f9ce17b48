//! One test binary for the guest's NCCL side: explain and its rules against
//! NCCL's own output, the topology file in the guest, and doctor.
//! Each module was a test binary of its own; they share one link here.

mod doctor;
mod loader_runs;
mod nccl_explain;
mod nccl_rules;
mod nccl_topo_guest;
