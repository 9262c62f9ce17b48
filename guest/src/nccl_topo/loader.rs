//! NCCL's loader ([`p2p_nccl::loader`]) on the file NCCL will
//! read, in this VM (its GPUs, nets and sysfs) or outside any: the refusals.

use std::path::Path;

use p2p_nccl::loader::{self, LoaderContext, LoaderRefusal};
use p2p_nccl::{CpuIdentity, VmFacts, VmNic};
use p2p_topology::Bdf;

use crate::probe::sysfs::resolve_root;

/// Whether sysfs under `root` holds a PCI device at `busid` as NCCL looks
/// it up (its first 12 characters, lower case: `getPciPath`,
/// src/graph/xml.cc:413-423 at v2.28.3-1).
pub fn in_sysfs(root: &Path, busid: &str) -> bool {
    busid
        .get(..12)
        .and_then(|b| b.to_ascii_lowercase().parse::<Bdf>().ok())
        .is_some_and(|b| root.join("bus/pci/devices").join(b.to_string()).exists())
}

/// NCCL's loader on `text` in a VM whose sysfs is under `sysfs_root`, with
/// these GPUs in use and these net devices; `cpu` is the CPU NCCL runs on.
pub fn refusals_in_vm(
    text: &str,
    sysfs_root: &Path,
    gpus: &[Bdf],
    nets: &[VmNic],
    cpu: &CpuIdentity,
) -> Vec<LoaderRefusal> {
    let root = resolve_root(sysfs_root);
    let here = |b: &str| in_sysfs(&root, b);
    loader::refusals(
        text,
        &LoaderContext {
            gpus: Some(gpus),
            nets: Some(nets),
            in_sysfs: &here,
            cpu,
        },
    )
}

/// NCCL's loader on `text`: in the VM whose facts are `facts` (its GPUs,
/// nets and sysfs under `sysfs_root`), or, with None, outside a VM as in one
/// that matches the file (every GPU and net of the file in use, no sysfs).
/// `cpu` is the CPU NCCL runs on.
pub fn loader_refusals(
    text: &str,
    sysfs_root: &Path,
    facts: Option<&VmFacts>,
    cpu: &CpuIdentity,
) -> Vec<LoaderRefusal> {
    match facts {
        Some(f) => {
            let gpus: Vec<Bdf> = f.gpus.iter().map(|g| g.busid).collect();
            refusals_in_vm(text, sysfs_root, &gpus, &f.nics, cpu)
        }
        None => loader::refusals(
            text,
            &LoaderContext {
                gpus: None,
                nets: None,
                in_sysfs: &|_| false,
                cpu,
            },
        ),
    }
}
