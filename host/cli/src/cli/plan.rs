//! `p2p-host plan`: clique plans per VM, as tables, JSON or VMM configuration.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context};
use clap::Args;
use p2p_allocation::clique::{plan_cliques, CliquePlan, MaxLevel};
use p2p_host::vmm::{self, EmitFormat, EmitOptions};
use p2p_report::PlanReport;
use p2p_topology::bdf::BdfParseError;
use p2p_topology::guest_layout::{
    self, DeviceRole, FirstSlot, GuestLayout, GuestTopology, VmDevice,
};
use p2p_topology::{Bdf, GpuSelector, PathClass, Role, Topology};

use super::domain::NcclChoice;
use super::select::TopologyArgs;

/// `NAME=BDF,BDF,...`: the GPUs (and RDMA NICs) given to one VM; or
/// `NAME=COUNT[:nics=M]`: how many the chooser picks for it.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// The VM's name (letters, digits, '-', '_' and '.').
    pub name: String,
    /// Its devices as given; after [`vm_specs`], only the GPUs.
    pub gpus: Vec<Bdf>,
    /// RDMA NICs, sorted out of the list by [`vm_specs`].
    pub nics: Vec<Bdf>,
    /// `NAME=COUNT[:nics=M]`: GPUs and NICs to choose; None when addresses were given.
    pub count: Option<VmCount>,
}

/// How many GPUs and RDMA NICs the chooser picks for a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmCount {
    /// GPUs, at least 1.
    pub gpus: usize,
    /// RDMA NICs, 0 for none.
    pub nics: usize,
}

/// Why a `--vm NAME=BDF,...` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmSpecError {
    /// No '=' between the name and the devices.
    #[error("'{0}': want NAME=BDF,BDF,... (a VM name, '=', then the PCI addresses of its GPUs and RDMA NICs)")]
    NoEquals(String),
    /// The name is empty or has a character outside letters, digits, '-', '_' and '.'.
    #[error("'{0}': a VM name is letters, digits, '-', '_' and '.'")]
    BadName(String),
    /// Nothing after the '='.
    #[error("VM {0}: no devices after '=' (want NAME=BDF,BDF,...)")]
    NoDevices(String),
    /// A count form with a bad count (`NAME=0`, `NAME=2:nics=x`).
    #[error("VM {0}: want NAME=COUNT or NAME=COUNT:nics=M with COUNT at least 1 and M a number")]
    BadCount(String),
    /// One item of the list is not a PCI address.
    #[error("VM {vm}: {source}")]
    BadAddress {
        /// The VM whose list holds it.
        vm: String,
        /// Why the item is not a PCI address (it names the item).
        source: BdfParseError,
    },
}

impl FromStr for VmSpec {
    type Err = VmSpecError;
    fn from_str(s: &str) -> Result<Self, VmSpecError> {
        let (name, list) = s
            .split_once('=')
            .ok_or_else(|| VmSpecError::NoEquals(s.to_string()))?;
        let valid = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
        if name.is_empty() || !name.chars().all(valid) {
            return Err(VmSpecError::BadName(name.to_string()));
        }
        if list.trim().is_empty() {
            return Err(VmSpecError::NoDevices(name.to_string()));
        }
        if let Some(count) = parse_count(name, list.trim())? {
            return Ok(VmSpec {
                name: name.to_string(),
                gpus: Vec::new(),
                nics: Vec::new(),
                count: Some(count),
            });
        }
        let gpus = list
            .split(',')
            .map(|b| {
                b.trim()
                    .parse::<Bdf>()
                    .map_err(|source| VmSpecError::BadAddress {
                        vm: name.to_string(),
                        source,
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VmSpec {
            name: name.to_string(),
            gpus,
            nics: Vec::new(),
            count: None,
        })
    }
}

/// `COUNT` or `COUNT:nics=M`; None when `list` is a device list (it has a '.').
fn parse_count(name: &str, list: &str) -> Result<Option<VmCount>, VmSpecError> {
    if list.contains('.') || !list.starts_with(|c: char| c.is_ascii_digit()) {
        return Ok(None);
    }
    let bad = || VmSpecError::BadCount(name.to_string());
    let (gpus, nics) = match list.split_once(':') {
        Some((g, rest)) => {
            let m = rest.strip_prefix("nics=").ok_or_else(bad)?;
            (g, m.parse::<usize>().map_err(|_| bad())?)
        }
        None => (list, 0),
    };
    let gpus = gpus.parse::<usize>().map_err(|_| bad())?;
    if gpus == 0 {
        return Err(bad());
    }
    Ok(Some(VmCount { gpus, nics }))
}

pub(super) fn parse_level(s: &str) -> Result<MaxLevel, String> {
    let class: PathClass = s
        .parse()
        .map_err(|e: p2p_topology::classify::PathClassParseError| e.to_string())?;
    MaxLevel::new(class).map_err(|e| e.to_string())
}

/// What `plan` and `apply` share: the topology, the level and the VMs.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Farthest PCIe class that still shares a clique: pix, pxb, phb, node or sys.
    #[arg(long, value_name = "LEVEL", default_value = "phb", value_parser = parse_level)]
    pub max_level: MaxLevel,
    /// A VM and its GPUs and RDMA NICs, NAME=BDF,BDF,..., or NAME=COUNT[:nics=M]
    /// to have the chooser pick them (repeat for several VMs, chosen in order).
    /// Default: one VM "vm0" with every GPU.
    #[arg(long = "vm", value_name = "NAME=BDF,...|NAME=COUNT[:nics=M]")]
    pub vms: Vec<VmSpec>,
    /// With NAME=COUNT: the GPUs and RDMA NICs the chooser may take. Default:
    /// every GPU and RDMA NIC not given to a VM by address.
    #[arg(long, value_name = "BDF,...", value_delimiter = ',')]
    pub available: Vec<Bdf>,
    /// With NAME=COUNT: Fabric Manager's partition list (`fmpm -l` output,
    /// shared NVSwitch model); only whole, inactive partitions are chosen.
    #[arg(long, value_name = "FILE")]
    pub fm_partitions: Option<PathBuf>,
    /// With NAME=COUNT: refuse when no set of the size is one clique, instead
    /// of taking the nearest set.
    #[arg(long)]
    pub strict: bool,
    /// Guest PCIe layout: flat (every device on pcie.0) or mirror (the host's
    /// root complexes, root ports and switches; QEMU and libvirt).
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        value_name = "LAYOUT",
        default_value = "flat"
    )]
    pub guest_topology: LayoutArg,
    /// First slot on the guest's pcie.0 that vp2p takes: flat puts one host
    /// device per slot from it, mirror one expander bus per host root complex.
    /// Decimal or 0x hex, 0x01 to 0x1e; move it when the VM already uses
    /// slots from 0x10.
    #[arg(long, value_name = "SLOT", default_value_t = FirstSlot::DEFAULT)]
    pub first_slot: FirstSlot,
}

/// `--guest-topology` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    Flat,
    Mirror,
}

impl From<LayoutArg> for GuestLayout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Flat => GuestLayout::Flat,
            LayoutArg::Mirror => GuestLayout::Mirror,
        }
    }
}

/// The guest tree of one planned VM: its GPUs with their cliques, then its NICs.
fn guest_of(
    topo: &Topology,
    plan: &CliquePlan,
    nics: &[Bdf],
    layout: GuestLayout,
    first_slot: FirstSlot,
) -> anyhow::Result<GuestTopology> {
    let mut devices: Vec<VmDevice> = plan
        .assignments
        .iter()
        .map(|a| VmDevice {
            host: a.bdf,
            role: DeviceRole::Gpu,
            clique: Some(a.clique.id()),
        })
        .collect();
    devices.extend(nics.iter().map(|n| VmDevice {
        host: *n,
        role: DeviceRole::Nic,
        clique: None,
    }));
    let g = match layout {
        GuestLayout::Flat => guest_layout::flat_from(topo, &devices, first_slot),
        GuestLayout::Mirror => guest_layout::mirror_from(topo, &devices, first_slot),
    };
    g.with_context(|| format!("VM {}: guest topology", plan.vm))
}

impl PlanArgs {
    /// Scans the topology and plans every VM.
    pub fn plan(&self) -> anyhow::Result<PlanReport> {
        Ok(self.plan_with_topology()?.0)
    }

    /// Plans every VM and returns the topology the plan was made on.
    pub fn plan_with_topology(&self) -> anyhow::Result<(PlanReport, Topology)> {
        let (root, topo, selector) = self.topology.load()?;
        let report = self.plan_vms(
            &root.path().display().to_string(),
            &topo,
            &selector,
            &self.vms,
        )?;
        Ok((report, topo))
    }

    /// Plans `vms` on a topology already read from `source`.
    pub fn plan_vms(
        &self,
        source: &str,
        topo: &Topology,
        selector: &GpuSelector,
        vms: &[VmSpec],
    ) -> anyhow::Result<PlanReport> {
        let (resolved, choices) = super::choose::resolve(self, topo, selector, vms)?;
        let specs = vm_specs(&resolved, topo, selector)?;
        let layout = GuestLayout::from(self.guest_topology);
        let mut plans = Vec::new();
        let mut guests = Vec::new();
        for spec in &specs {
            let plan = plan_cliques(topo, &spec.name, &spec.gpus, self.max_level)
                .with_context(|| format!("VM {}", spec.name))?;
            guests.push(guest_of(topo, &plan, &spec.nics, layout, self.first_slot)?);
            plans.push(plan);
        }
        let devices: Vec<Vec<Bdf>> = specs
            .iter()
            .map(|s| s.gpus.iter().chain(&s.nics).copied().collect())
            .collect();
        let vm_devices: Vec<(&str, &[Bdf])> = specs
            .iter()
            .zip(&devices)
            .map(|(s, d)| (s.name.as_str(), d.as_slice()))
            .collect();
        let groups = p2p_topology::iommu_groups::check(topo, &vm_devices)?;
        let mut report = PlanReport::new(source, self.max_level, plans, layout, guests, groups);
        report.choices = choices;
        Ok(report)
    }
}

/// Checks the VMs' GPUs: known, GPUs under the selector, in one VM each.
pub(super) fn vm_specs(
    specs: &[VmSpec],
    topo: &Topology,
    selector: &GpuSelector,
) -> anyhow::Result<Vec<VmSpec>> {
    let all: Vec<Bdf> = topo
        .functions
        .iter()
        .filter(|f| selector.role(f) == Role::Gpu)
        .map(|f| f.bdf)
        .collect();
    if specs.is_empty() {
        if all.is_empty() {
            bail!("no GPUs found; choose them with --gpus or --gpu-class");
        }
        return Ok(vec![VmSpec {
            name: "vm0".into(),
            gpus: all,
            nics: Vec::new(),
            count: None,
        }]);
    }
    let mut owner: BTreeMap<Bdf, &str> = BTreeMap::new();
    let mut names: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for spec in specs {
        if names.contains(&spec.name.as_str()) {
            bail!("VM {} is named twice", spec.name);
        }
        names.push(&spec.name);
        if spec.count.is_some() {
            bail!(
                "VM {}: NAME=COUNT is for `p2p-host plan`; give the addresses (NAME=BDF,...)",
                spec.name
            );
        }
        let mut sorted = VmSpec {
            name: spec.name.clone(),
            gpus: Vec::new(),
            nics: Vec::new(),
            count: None,
        };
        for g in &spec.gpus {
            let Some(f) = topo.function(*g) else {
                bail!("VM {}: {g} is not a PCI function of this host", spec.name);
            };
            match selector.role(f) {
                Role::Gpu => sorted.gpus.push(*g),
                Role::Nic => sorted.nics.push(*g),
                Role::EthernetOnly => bail!(
                    "VM {}: {g} is a network function without an RDMA device (no infiniband/ \
                     below it): vp2p places GPUs and RDMA NICs; pass plain NICs through by hand",
                    spec.name
                ),
                _ => {}
            }
            if !matches!(selector.role(f), Role::Gpu | Role::Nic) {
                bail!(
                    "VM {}: {g} (vendor {:#06x}, class {:#08x}) is neither a GPU nor an RDMA \
                     NIC: the P2P clique capability is for NVIDIA display-class functions \
                     (select test devices with --gpus or --gpu-class)",
                    spec.name,
                    f.vendor,
                    f.class
                );
            }
            if let Some(other) = owner.insert(*g, &spec.name) {
                if other == spec.name {
                    bail!("VM {}: {g} is listed twice", spec.name);
                }
                bail!("{g} is given to two VMs: {other} and {}", spec.name);
            }
        }
        if sorted.gpus.is_empty() {
            bail!("VM {}: no GPU among its devices", spec.name);
        }
        out.push(sorted);
    }
    Ok(out)
}

#[derive(Debug, Args)]
pub struct PlanCmd {
    #[command(flatten)]
    plan: PlanArgs,
    /// Print the plan as JSON (schema vp2p.plan/1; same as --emit json).
    #[arg(long, conflicts_with = "emit")]
    json: bool,
    /// Print VMM configuration (or NCCL's topology file) instead of the table.
    #[arg(long, value_enum, ignore_case = true, value_name = "FORMAT")]
    emit: Option<EmitFormat>,
    /// Hand the NCCL file at this host path to the guest through fw_cfg
    /// (QEMU -fw_cfg, libvirt <sysinfo type='fwcfg'>); "{vm}" is replaced by the
    /// VM's name. Write the file with --emit nccl-topo.
    #[arg(long, value_name = "PATH")]
    nccl_topo_path: Option<String>,
    /// First PCI controller index the libvirt domain does not use yet (the
    /// mirrored controllers are numbered from it).
    #[arg(long, value_name = "N", default_value_t = 1)]
    libvirt_first_index: u32,
    /// With --emit proxmox: the Proxmox VE VM id (100 to 999999999) to write
    /// into the file name and the qm command, instead of the placeholder VMID.
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u32).range(100..=999_999_999))]
    proxmox_vmid: Option<u32>,
    /// Patch this libvirt domain XML ("-": standard input) with the plan for
    /// the GPUs and RDMA NICs it passes through, and print it: aliases where
    /// missing, the clique overrides, and with --guest-topology mirror the
    /// controllers and guest addresses. Every other byte is kept.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["emit", "json", "vms"])]
    patch_domain: Option<PathBuf>,
    /// With --patch-domain: put the NCCL file's text into the domain's fw_cfg
    /// entry instead of naming a host file.
    #[arg(long, requires = "patch_domain", conflicts_with = "nccl_topo_path")]
    nccl_topo_inline: bool,
    /// Also draw the plan into this SVG file: the host tree with each VM's
    /// devices framed and GPUs coloured by clique (legend; devices in no VM
    /// grey), each VM's reasons, and with --guest-topology mirror the guest
    /// trees.
    #[arg(long, value_name = "FILE", conflicts_with = "patch_domain")]
    svg: Option<PathBuf>,
}

pub fn run(args: PlanCmd) -> anyhow::Result<()> {
    if let Some(file) = &args.patch_domain {
        return patch_domain(&args, file);
    }
    let format = if args.json {
        Some(EmitFormat::Json)
    } else {
        args.emit
    };
    if args.proxmox_vmid.is_some() && format != Some(EmitFormat::Proxmox) {
        bail!("--proxmox-vmid goes with --emit proxmox");
    }
    let (report, topo) = args.plan.plan_with_topology()?;
    if let Some(path) = &args.svg {
        let tree = p2p_report::TopoReport::build(
            &topo,
            &args.plan.topology.selector(),
            &report.sysfs_root,
        );
        let source = args.plan.topology.sysfs_root.display().to_string();
        let picture = p2p_report::picture::plan::plan_svg(&topo, &tree, &report, &source);
        super::write_picture(path, &picture)?;
    }
    let opts = EmitOptions {
        nccl_topo_path: args.nccl_topo_path.clone(),
        libvirt_first_index: args.libvirt_first_index,
        proxmox_vmid: args.proxmox_vmid,
    };
    match format {
        Some(f) => {
            // The table carries the warnings; configuration output keeps them
            // off standard output. Proxmox's entries give the VM every
            // function of its groups, and its notes say so instead.
            let warnings = report
                .iommu_groups
                .iter()
                .filter_map(|g| g.warning.as_ref())
                .filter(|_| f != EmitFormat::Proxmox);
            for w in warnings {
                eprintln!("p2p-host plan: warning: {w}");
            }
            print!("{}", vmm::emit(&report, &topo, f, &opts)?)
        }
        None => print!("{}", report.render_text()),
    }
    Ok(())
}

/// `--patch-domain FILE`: the patched domain on standard output, what changed
/// on standard error.
fn patch_domain(args: &PlanCmd, file: &Path) -> anyhow::Result<()> {
    let (text, source) = if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the domain from standard input")?;
        (text, "standard input".to_string())
    } else {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        (text, file.display().to_string())
    };
    let nccl = match (&args.nccl_topo_path, args.nccl_topo_inline) {
        (_, true) => NcclChoice::Inline,
        (Some(p), false) => NcclChoice::File(p.clone()),
        (None, false) => NcclChoice::Off,
    };
    let patched = super::domain::patch(
        &args.plan,
        &text,
        &source,
        &nccl,
        vmm::libvirt::FwCfgVia::Sysinfo,
    )?;
    print!("{}", patched.text);
    std::io::stdout().flush()?;
    eprint!("{}", patched.report("p2p-host plan"));
    Ok(())
}
