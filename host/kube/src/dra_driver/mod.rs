//! `p2p-host dra driver`: the vp2p DRA driver, on the generic kubelet
//! plugin of [`crate::kubelet_plugin`] (registration, the DRAPlugin
//! services, deadlines, the slices kept published). What is vp2p's own is
//! here: the node's ResourceSlices built from its PCI tree ([`publication`]),
//! and claims of its devices prepared: the IOMMU groups whole on vfio-pci, a
//! CDI spec and the KEP-5304 device metadata written atomically, a
//! checkpoint so a restart neither loses nor doubles a preparation.
//!
//! [`prepare`] is the [`Driver`] (the layer's [`DraDriver`]),
//! [`allocation`] a claim's devices resolved against the publication,
//! [`claim_files`] what it writes, [`checkpoint`] what it records, [`vfio`]
//! binding, [`cdi`] the spec, [`device_health`] the prepared devices'
//! health, [`recovery`] what a restart, a reboot or a
//! damaged checkpoint leaves, [`uevents`] the kernel's device events that
//! wake the publisher.
//!
//! [`DraDriver`]: crate::kubelet_plugin::DraDriver

pub mod allocation;
pub mod cdi;
pub mod checkpoint;
pub mod claim_files;
pub mod device_health;
pub mod fm_partitions;
pub mod prepare;
pub mod publication;
pub mod recovery;
pub mod uevents;
pub mod vfio;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use p2p_topology::{GpuSelector, TopologyReader};

pub use crate::kubelet_plugin::{
    remove_slices, ClaimDir, ClaimError, ClaimRef, ClaimSource, PluginError, PluginSettings, Source,
};
pub use prepare::Driver;
pub use publication::build;

/// What the driver was asked for.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What the kubelet plugin layer is asked for: the node's and the
    /// driver's names, the sockets, the checkpoint, the API timeout, the log.
    pub plugin: PluginSettings,
    /// The sysfs tree functions are read from and bound in.
    pub sysfs_root: PathBuf,
    /// How the tree is read (p2p-host's scan and NVLink discovery).
    pub reader: Arc<dyn TopologyReader>,
    /// Which functions are GPUs.
    pub selector: GpuSelector,
    /// Fabric Manager's partitions (an `fmPartition<N>` attribute per
    /// size), from a file read again when it changes.
    pub partitions: Option<Arc<fm_partitions::FmPartitionsFile>>,
    /// Bind group endpoints to vfio-pci at prepare (otherwise refuse).
    pub bind: bool,
    /// The order GPUs are published in (the order the scheduler tries them).
    pub order: p2p_allocation::dra::DeviceOrder,
    /// Give containers `/dev/iommu` and the VFIO cdev instead of the group.
    pub iommufd: bool,
    /// Where CDI specs are written.
    pub cdi_dir: PathBuf,
    /// Where device metadata files are written on the host.
    pub metadata_dir: PathBuf,
    /// How long a bind may take to show.
    pub bind_timeout: Duration,
    /// Start from what the checkpoint still records, released, the file
    /// moved aside (`--recover`).
    pub recover: bool,
}

impl Settings {
    /// The defaults for a kubelet whose root directory is `kubelet_root`
    /// (`/var/lib/kubelet`): the layer's ([`PluginSettings::new`]) with
    /// messages prefixed `p2p-host:`, CDI specs in `/var/run/cdi`, metadata in
    /// `/var/run/vp2p/dra-metadata`; `/sys` read by `reader`, NVIDIA GPUs, no
    /// partitions, GPUs published away from a NIC first.
    pub fn new(
        node_name: &str,
        driver_name: &str,
        kubelet_root: &Path,
        reader: Arc<dyn TopologyReader>,
    ) -> Self {
        let mut plugin = PluginSettings::new(node_name, driver_name, kubelet_root);
        plugin.log = |m| eprintln!("p2p-host: {m}");
        Self {
            plugin,
            sysfs_root: PathBuf::from("/sys"),
            reader,
            selector: GpuSelector::Nvidia,
            partitions: None,
            bind: false,
            order: p2p_allocation::dra::DeviceOrder::NicLast,
            iommufd: false,
            cdi_dir: PathBuf::from("/var/run/cdi"),
            metadata_dir: PathBuf::from("/var/run/vp2p/dra-metadata"),
            bind_timeout: Duration::from_secs(10),
            recover: false,
        }
    }
}

/// Serves the driver until SIGTERM or SIGINT ([`crate::kubelet_plugin::run`]);
/// with the API server, kernel uevents of PCI functions wake the publisher.
pub fn run(settings: Settings, source: Source) -> Result<(), PluginError> {
    let log = settings.plugin.log;
    let wake = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(AtomicBool::new(false));
    if let Source::Cluster { resync, .. } = &source {
        let notify = wake.clone();
        match uevents::watch(Duration::from_secs(1), stop.clone(), move || {
            notify.notify_one()
        }) {
            Ok(_) => log(
                "watching kernel uevents: a PCI bind, unbind, add or remove is published at once",
            ),
            Err(e) => log(&format!(
                "kernel uevents not available ({e}): device changes are checked every {resync:?} only"
            )),
        }
    }
    let plugin = settings.plugin.clone();
    let served = crate::kubelet_plugin::run(plugin, source, wake, move |claims| {
        Driver::new(settings, claims)
    });
    stop.store(true, Ordering::Relaxed);
    served
}
