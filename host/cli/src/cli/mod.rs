//! Command-line front end: argument types and one module per subcommand.

mod allocate;
mod apply;
mod assets;
mod check;
mod choose;
mod device_plugin;
mod domain;
mod dra;
mod inject;
mod kubevirt;
mod kubevirt_plugin;
mod plan;
mod schema;
mod select;
mod serve;
mod snapshot;
mod topo;
mod vfio_check;

use clap::{Parser, Subcommand};

/// `--version`: the package version and the commit built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("VP2P_COMMIT"),
    ")"
);

/// GPU peer-to-peer for virtual machines: host side.
#[derive(Debug, Parser)]
#[command(name = "p2p-host", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the GPU/NIC topology matrix (like `nvidia-smi topo -m`) and the
    /// ACS/IOMMU routing of every GPU pair, from sysfs alone.
    Topo(topo::TopoArgs),
    /// Copy the PCI part of a sysfs tree into a directory (a fixture).
    Snapshot(snapshot::SnapshotArgs),
    /// Partition each VM's GPUs into P2P cliques, with reasons; --emit writes
    /// QEMU, libvirt or Cloud Hypervisor configuration.
    Plan(plan::PlanCmd),
    /// Will P2P work in the VMs? Every condition (IOMMU, groups, binding, ACS
    /// routes, BARs, peer mapping, KVM, NUMA) as PASS/WARN/FAIL with the
    /// evidence and the fix. Reads only. Exit 0 all pass, 1 a FAIL, 2 WARNs.
    Check(check::CheckArgs),
    /// Choose N GPUs among the available ones (the kubelet's
    /// GetPreferredAllocation): one clique, IOMMU groups whole, least
    /// fragmentation; the chosen ids in order, with reasons.
    Allocate(allocate::AllocateArgs),
    /// Kubernetes device plugin (kubelet API v1beta1) for GPUs bound to
    /// vfio-pci: registers the resource, reports health, answers
    /// GetPreferredAllocation with the chooser and Allocate with /dev/vfio.
    DevicePlugin(device_plugin::DevicePluginArgs),
    /// Dynamic Resource Allocation: `dra slices` prints the ResourceSlices
    /// (resource.k8s.io/v1) the vp2p DRA driver would publish for this node;
    /// `dra driver` runs its kubelet plugin.
    Dra(dra::DraArgs),
    /// Hooks for orchestrators: `kubevirt on-define-domain` patches the domain
    /// KubeVirt's virt-launcher defines (run by its sidecar-shim); `kubevirt
    /// plugin-hook` serves the same patch as a KubeVirt 1.9.0+ plugin hook.
    Kubevirt(kubevirt::KubevirtArgs),
    /// Hot-add a VM's GPUs with their cliques to a running Cloud Hypervisor.
    Apply(apply::ApplyArgs),
    /// Write the virtual config space a guest would read: a captured config
    /// with the P2P capability placed in it, and say where it went.
    Inject(inject::InjectArgs),
    /// Print the JSON Schema of a document this tool writes (topo, plan,
    /// inject, snapshot, apply); the list without a name.
    Schema(schema::SchemaArgs),
    /// Serve GPUs (captured, or real ones bound to vfio-pci) over vfio-user with the P2P capability in their
    /// config space (QEMU -device vfio-user-pci, Cloud Hypervisor --user-device).
    Serve(serve::ServeArgs),
    /// What this container (or VM launcher) was given: each VFIO group under
    /// /dev/vfio opened, each function's config space read through its device
    /// fd (ids, class, the P2P capability), and the claim's device metadata.
    VfioCheck(vfio_check::VfioCheckArgs),
    /// Write the man pages and shell completions (for packagers).
    #[command(hide = true)]
    Assets(assets::AssetsArgs),
}

impl Cli {
    /// Whether the command is a long-running server (vfio-user, device
    /// plugin, plugin hook, DRA driver): a peer that hangs up must not end it
    /// with SIGPIPE.
    pub fn is_server(&self) -> bool {
        match &self.command {
            Command::Serve(_) | Command::DevicePlugin(_) => true,
            Command::Kubevirt(k) => k.is_server(),
            Command::Dra(d) => d.is_server(),
            _ => false,
        }
    }
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Topo(a) => topo::run(a),
        Command::Snapshot(a) => snapshot::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Apply(a) => apply::run(a),
        Command::Allocate(a) => allocate::run(a),
        Command::DevicePlugin(a) => device_plugin::run(a),
        Command::Dra(a) => dra::run(a),
        Command::Kubevirt(a) => kubevirt::run(a),
        Command::Check(a) => check::run(a),
        Command::Inject(a) => inject::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Schema(a) => schema::run(a),
        Command::VfioCheck(a) => vfio_check::run(a),
        Command::Assets(a) => assets::run(a),
    }
}

/// Writes a picture (`--svg FILE`) and says so on standard error, with its size.
fn write_picture(path: &std::path::Path, svg: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {} ({} bytes)", path.display(), svg.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;

    /// Every long-running command keeps SIGPIPE ignored: the kubelet's plugin
    /// watcher closes its connection right after NotifyRegistrationStatus,
    /// and the next write on it would otherwise end the DRA driver.
    #[test]
    fn the_long_running_commands_are_servers_and_the_one_shot_ones_are_not() {
        let server = |args: &[&str]| {
            let mut v = vec!["p2p-host"];
            v.extend_from_slice(args);
            Cli::try_parse_from(v).expect("parses").is_server()
        };
        assert!(server(&["dra", "driver", "--node-name", "n"]));
        assert!(server(&["device-plugin", "--resource", "vp2p.io/gpu"]));
        assert!(server(&["kubevirt", "plugin-hook"]));
        assert!(!server(&["dra", "slices", "--node-name", "n"]));
        assert!(!server(&["topo"]));
    }
}
