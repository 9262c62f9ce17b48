//! `p2p-host device-plugin`: the Kubernetes device plugin (the one command
//! that starts an async runtime).

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use clap::Args;
use p2p_host_kube::device_plugin::{self, api, Config, Selector};

#[derive(Debug, Args)]
pub struct DevicePluginArgs {
    /// The extended resource to offer, e.g. nvidia.com/GH100_H100_SXM5_80GB
    /// (KubeVirt's permittedHostDevices resourceName). The kubelet registers
    /// only an extended resource name, DOMAIN/NAME outside kubernetes.io/:
    /// another is refused here.
    #[arg(long, value_name = "NAME", value_parser = parse_resource)]
    resource: String,
    /// Offer the functions of this vendor and device ID (hex, e.g. 10DE:2330);
    /// by default NVIDIA display functions. Only those bound to vfio-pci.
    #[arg(long, value_name = "VENDOR:DEVICE")]
    selector: Option<Selector>,
    /// The kubelet's device-plugins directory (kubelet.sock).
    #[arg(long, value_name = "DIR", default_value = api::DEVICE_PLUGIN_PATH)]
    kubelet_dir: PathBuf,
    /// sysfs tree to read the GPUs and their health from.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// GetPreferredAllocation: farthest PCIe class that still shares a clique
    /// (pix, pxb, phb, node or sys), as `p2p-host allocate --max-level`.
    #[arg(long, value_name = "LEVEL", default_value = "phb", value_parser = super::plan::parse_level)]
    max_level: p2p_allocation::clique::MaxLevel,
    /// GetPreferredAllocation: refuse when no N available GPUs are one clique
    /// (the kubelet then chooses by itself) instead of answering the nearest set.
    #[arg(long)]
    strict: bool,
    /// Fabric Manager's partition list (`fmpm -l` output): answer only whole,
    /// inactive partitions. Read once at start.
    #[arg(long, value_name = "FILE")]
    fm_partitions: Option<PathBuf>,
    #[command(flatten)]
    nvlinks: super::select::NvLinkArgs,
    /// Milliseconds between health and kubelet.sock checks.
    #[arg(long, value_name = "MS", default_value_t = 1000, hide = true)]
    poll_ms: u64,
}

/// `--resource`: refused at once, as the kubelet would refuse it on every
/// registration.
fn parse_resource(s: &str) -> Result<String, device_plugin::InvalidResourceName> {
    device_plugin::check_resource_name(s)?;
    Ok(s.to_string())
}

pub fn run(args: DevicePluginArgs) -> anyhow::Result<()> {
    let partitions = super::select::read_fm_partitions(args.fm_partitions.as_deref())?;
    // The tree read as `allocate` reads it (the scan, then NVLinks between
    // NVIDIA GPUs: the map, NVML on the live /sys, the NVSwitch heuristic),
    // so GetPreferredAllocation answers what `allocate` answers.
    let reader = args.nvlinks.reader(p2p_topology::GpuSelector::Nvidia);
    device_plugin::run(Config {
        policy: device_plugin::Policy {
            max_level: args.max_level,
            strict: args.strict,
            partitions,
        },
        resource: args.resource,
        selector: args.selector.unwrap_or(Selector::Nvidia),
        kubelet_dir: args.kubelet_dir,
        sysfs_root: args.sysfs_root,
        reader: Arc::new(reader),
        poll: Duration::from_millis(args.poll_ms.max(10)),
        log: |m| eprintln!("device-plugin: {m}"),
    })?;
    Ok(())
}
