//! `p2p-host device-plugin`: a Kubernetes device plugin (kubelet API v1beta1)
//! for GPUs bound to vfio-pci, whose GetPreferredAllocation is vp2p's chooser.
//!
//! The async gRPC stack (tokio, tonic) lives here and only here: [`run`]
//! starts the one runtime of the process; no other command starts one.
//! [`api`] is the protocol (generated from host/kube/proto, both sides),
//! [`inventory`] the plugin's answers without gRPC.

pub mod api;
pub mod inventory;
mod lifecycle;
mod plugin;
mod resource_name;
mod restart;

use std::path::PathBuf;
use std::time::Duration;

pub use inventory::{kubevirt_env_var, socket_name, Inventory, Policy, Selector};
pub use plugin::{options, Plugin};
pub use resource_name::{check_resource_name, InvalidResourceName, ResourceNameError};

/// What `p2p-host device-plugin` was asked for.
#[derive(Debug, Clone)]
pub struct Config {
    /// The extended resource offered (`vendor-domain/resourcetype`).
    pub resource: String,
    /// Which functions are the resource's GPUs.
    pub selector: Selector,
    /// The kubelet's device-plugins directory (kubelet.sock and our socket).
    pub kubelet_dir: PathBuf,
    /// The sysfs tree the GPUs and their health are read from.
    pub sysfs_root: PathBuf,
    /// How the tree is read (p2p-host's sysfs scan).
    pub reader: std::sync::Arc<dyn p2p_topology::TopologyReader>,
    /// How often health and kubelet.sock are checked.
    pub poll: Duration,
    /// How GetPreferredAllocation chooses (level, strictness, partitions).
    pub policy: Policy,
    /// Where the plugin's messages go (registrations, health changes, errors
    /// it retries): the library prints nothing itself.
    pub log: fn(&str),
}

/// Why the device plugin stopped.
#[derive(Debug, thiserror::Error)]
pub enum DevicePluginError {
    /// The kubelet would refuse the resource name ([`check_resource_name`]).
    #[error("{0}")]
    ResourceName(#[from] InvalidResourceName),
    /// The sysfs tree could not be read.
    #[error("reading sysfs: {0}")]
    Scan(#[from] p2p_topology::TopologyReadError),
    /// Our socket could not be made.
    #[error("listening on {}: {source}", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The runtime or a signal handler could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The DevicePlugin service [`run`] serves, answering from `inventory`'s
/// tree as scanned now, without a socket or a kubelet: what the fuzz targets
/// hand decoded requests to. Its ListAndWatch stream ends after the first list.
pub fn service(inventory: Inventory) -> Result<Plugin, DevicePluginError> {
    let topo = std::sync::Arc::new(inventory.scan()?);
    let devices = inventory.devices(&topo);
    let (_, health) = tokio::sync::watch::channel(plugin::Seen { topo, devices });
    let (_, stop) = tokio::sync::watch::channel(true);
    Ok(plugin::Plugin {
        inventory: std::sync::Arc::new(inventory),
        health,
        stop,
    })
}

/// Checks the resource name by the kubelet's rule, finds the GPUs, then
/// serves and registers until SIGTERM or SIGINT.
pub fn run(config: Config) -> Result<(), DevicePluginError> {
    // Before anything else: the kubelet refuses such a name on every
    // registration, so retrying could never succeed.
    check_resource_name(&config.resource)?;
    let inventory = Inventory::discover(
        config.reader.clone(),
        &config.sysfs_root,
        &config.resource,
        config.selector,
    )?
    .with_policy(config.policy.clone());
    let ids: Vec<String> = inventory.gpus().iter().map(|b| b.to_string()).collect();
    (config.log)(&format!(
        "{} offers {} GPU(s) bound to vfio-pci: {}",
        config.resource,
        ids.len(),
        ids.join(",")
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(lifecycle::serve(config, inventory))
}
