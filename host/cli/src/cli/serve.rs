//! `p2p-host serve`: vfio-user servers presenting GPUs with the P2P clique
//! capability, one socket (and thread set) per GPU: captured ones
//! (`config=`) or real devices bound to vfio-pci (`vfio=`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use p2p_host::overlay::{OverlayOptions, PlacementAction};
use p2p_host::serve::{
    self, parse_bar_size, BarKind, CaptureFiles, CapturedGpu, GpuBackend, GpuSpec, IrqIndex,
    RegionIndex, ServeError, ServeEvent, ServeHandle, ServedGpu, SocketMode, SourcedSpec,
    SpecOrigin, VfioGpu,
};
use p2p_topology::ByteSize;
use p2p_topology::Clique;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A GPU to serve (repeat for several, one socket each):
    /// socket=PATH,config=FILE,clique=N[,resource=FILE][,max-bar=SIZE][,allow-non-nvidia][,any-offset]
    /// or socket=PATH,vfio=BDF,clique=N[,allow-non-nvidia][,any-offset].
    /// config is a captured config space (sysfs `config` read as root); BAR
    /// sizes come from the sysfs `resource` file next to it unless resource=
    /// names one; max-bar=SIZE (e.g. 256M) serves larger memory BARs at SIZE.
    /// vfio=BDF serves a real function bound to vfio-pci (its IOMMU group
    /// viable): the client maps its BARs, interrupts and DMA go through the kernel.
    #[arg(long = "gpu", value_name = "SPEC")]
    gpus: Vec<GpuSpec>,
    /// Read GPU specs from FILE, one `--gpu` value a line (`#` comments), as
    /// `p2p-host-serve@NAME.service` does with /etc/vp2p/serve/NAME.conf. A
    /// missing or malformed file exits with 78 (EX_CONFIG), which the unit
    /// does not restart on.
    #[arg(long, value_name = "FILE")]
    gpus_from: Option<PathBuf>,
    /// One GPU, short form: its socket (with --config and --clique).
    #[arg(long, value_name = "PATH", conflicts_with = "gpus", requires_all = ["config", "clique"])]
    socket: Option<PathBuf>,
    /// Short form: the captured config space.
    #[arg(long, value_name = "FILE", requires = "socket")]
    config: Option<PathBuf>,
    /// Short form: the clique id, 0..=15.
    #[arg(long, value_name = "N", requires = "socket")]
    clique: Option<u8>,
    /// Short form: the sysfs `resource` file with the BAR sizes.
    #[arg(long, value_name = "FILE", requires = "socket")]
    resource: Option<PathBuf>,
    /// Short form: serve memory BARs larger than SIZE at SIZE.
    #[arg(long, value_name = "SIZE", value_parser = parse_bar_size, requires = "socket")]
    max_bar: Option<u64>,
    /// Short form: accept a function that is not an NVIDIA display controller.
    #[arg(long, requires = "socket")]
    allow_non_nvidia: bool,
    /// Short form: when 0xC8 and 0xD4 are both occupied, use the first free
    /// dword from 0x40 (neither QEMU nor Cloud Hypervisor would).
    #[arg(long, requires = "socket")]
    any_offset: bool,
    /// Permission bits of the sockets, octal: 0600 (default) lets only this
    /// user connect, 0660 also the socket's group (the host unit runs with
    /// group kvm, the group QEMU runs in).
    #[arg(long, value_name = "MODE", default_value = "0600")]
    socket_mode: SocketMode,
    /// Also print routine events: DMA maps and unmaps, resets.
    #[arg(short, long)]
    verbose: bool,
    /// The sysfs root vfio= devices are checked in (their IOMMU group and drivers).
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    sysfs_root: PathBuf,
}

impl ServeArgs {
    /// Every GPU asked for, with where it was asked for: the `--gpu`s, the
    /// conf's lines, then the short form.
    fn specs(&self) -> anyhow::Result<Vec<SourcedSpec>> {
        let mut specs: Vec<SourcedSpec> = self
            .gpus
            .iter()
            .enumerate()
            .map(|(i, spec)| SourcedSpec {
                origin: SpecOrigin::Arg(i + 1),
                spec: spec.clone(),
            })
            .collect();
        if let Some(file) = &self.gpus_from {
            specs.extend(serve::read_spec_file(file)?);
        }
        if let (Some(socket), Some(config), Some(clique)) =
            (&self.socket, &self.config, self.clique)
        {
            if socket.as_os_str().len() > serve::SOCKET_PATH_MAX {
                return Err(ServeError::SocketTooLong {
                    path: socket.clone(),
                    len: socket.as_os_str().len(),
                }
                .into());
            }
            specs.push(SourcedSpec {
                origin: SpecOrigin::Arg(specs.len() + 1),
                spec: GpuSpec {
                    socket: socket.clone(),
                    config: Some(config.clone()),
                    vfio: None,
                    clique: Clique::new(clique).context("--clique")?,
                    resource: self.resource.clone(),
                    max_bar: self.max_bar,
                    allow_non_nvidia: self.allow_non_nvidia,
                    any_offset: self.any_offset,
                },
            });
        }
        if specs.is_empty() {
            bail!("nothing to serve: give --gpu socket=PATH,config=FILE,clique=N, --gpus-from FILE, or --socket, --config, --clique");
        }
        serve::check_distinct_sockets(&specs)?;
        Ok(specs)
    }
}

/// How errors about the Nth GPU name it: `gpuN`, after the conf line it
/// came from (`FILE:LINE: gpuN`).
fn gpu_label(i: usize, origin: &SpecOrigin) -> String {
    match origin {
        SpecOrigin::Line { .. } => format!("{origin}: gpu{i}"),
        SpecOrigin::Arg(_) => format!("gpu{i}"),
    }
}

/// A GPU ready to serve: a capture or a VFIO device, with its banner.
enum Prepared {
    Captured(ServedGpu<CapturedGpu>),
    Vfio(ServedGpu<VfioGpu>),
}

fn overlay_options(spec: &GpuSpec) -> OverlayOptions {
    OverlayOptions {
        allow_non_nvidia: spec.allow_non_nvidia,
        any_offset: spec.any_offset,
    }
}

/// Opens the capture or the device and places the capability.
fn prepare(name: &str, spec: &GpuSpec, sysfs: &std::path::Path) -> anyhow::Result<Prepared> {
    if let Some(bdf) = spec.vfio {
        let gpu = VfioGpu::open(sysfs, bdf).with_context(|| name.to_string())?;
        let served = ServedGpu::new(gpu, spec.clique, overlay_options(spec))
            .with_context(|| format!("{name}: {bdf}"))?;
        return Ok(Prepared::Vfio(served));
    }
    let config = spec.config.clone().context("no config= or vfio=")?;
    let files = CaptureFiles {
        config: config.clone(),
        resource: spec.resource.clone(),
    };
    // Every error of `open` names the file it concerns.
    let (gpu, scaled) =
        CapturedGpu::open(&files, spec.max_bar).with_context(|| name.to_string())?;
    for s in &scaled {
        eprintln!(
            "p2p-host serve: {name}: max-bar={}: {s}; the guest sees the smaller BAR",
            ByteSize(spec.max_bar.unwrap_or(0))
        );
    }
    let served = ServedGpu::new(gpu, spec.clique, overlay_options(spec))
        .with_context(|| format!("{name}: {}", config.display()))?;
    Ok(Prepared::Captured(served))
}

/// The first banner line, the capability line and the interrupts line,
/// common to both kinds; `what` names the source.
fn describe_common<B: GpuBackend>(
    name: &str,
    what: &str,
    spec: &GpuSpec,
    gpu: &ServedGpu<B>,
) -> (String, String) {
    let mut s = String::new();
    let mut id = [0u8; 4];
    let _ = gpu.config_read(0, &mut id);
    let _ = writeln!(
        s,
        "p2p-host serve: {name}: {what} ({:04x}:{:04x}), clique {}, socket {}",
        u16::from_le_bytes([id[0], id[1]]),
        u16::from_le_bytes([id[2], id[3]]),
        spec.clique,
        spec.socket.display()
    );
    let p = gpu.placement();
    let hex: Vec<String> = p.capability.iter().map(|b| format!("{b:02x}")).collect();
    let how = match (p.action, p.linked_after) {
        (PlacementAction::AlreadyPresent, _) => "already present, served unchanged".to_string(),
        (_, Some(l)) => format!(
            "after capability {:#04x} at {:#04x} (next pointer {:#04x}: {:#04x} -> {:#04x})",
            l.id, l.offset, l.next.offset, l.next.old, l.next.new
        ),
        (_, None) => "first in the list (0x34 points to it)".to_string(),
    };
    let _ = writeln!(
        s,
        "  capability at {:#04x} [{}], {how}",
        p.offset,
        hex.join(" ")
    );
    let irqs: Vec<String> = IrqIndex::ALL
        .iter()
        .map(|&i| format!("{} {}", i.label(), gpu.backend().irq_info(i).count))
        .collect();
    (s, format!("  interrupts: {}\n", irqs.join(", ")))
}

fn describe_captured(name: &str, spec: &GpuSpec, gpu: &ServedGpu<CapturedGpu>) -> String {
    let what = spec
        .config
        .as_ref()
        .map(|c| c.display().to_string())
        .unwrap_or_default();
    let (mut s, irqs) = describe_common(name, &what, spec, gpu);
    let bars: Vec<String> = gpu
        .backend()
        .bars()
        .bars()
        .iter()
        .map(|b| {
            let kind = match b.kind {
                BarKind::Io => "I/O",
                BarKind::Mem32 => "32-bit",
                BarKind::Mem64 => "64-bit",
            };
            let pf = if b.prefetchable { " prefetchable" } else { "" };
            let scaled = if b.size != b.captured_size {
                format!(" (captured {})", ByteSize(b.captured_size))
            } else {
                String::new()
            };
            format!("BAR{} {} {kind}{pf}{scaled}", b.index, ByteSize(b.size))
        })
        .collect();
    let _ = writeln!(s, "  {}; no ROM", bars.join(", "));
    s + &irqs
}

fn describe_vfio(name: &str, spec: &GpuSpec, gpu: &ServedGpu<VfioGpu>) -> String {
    let v = gpu.backend();
    let what = format!("VFIO device {} (IOMMU group {})", v.bdf(), v.group());
    let (mut s, irqs) = describe_common(name, &what, spec, gpu);
    let _ = writeln!(
        s,
        "  real: config space (read and written through the VFIO device fd), BARs, \
         interrupts, DMA; overlaid: the P2P capability and the next pointer above"
    );
    let mut bars = Vec::new();
    for idx in RegionIndex::all() {
        let (RegionIndex::Bar(_) | RegionIndex::Rom) = idx else {
            continue;
        };
        let r = v.vfio_region(idx);
        if r.info.size == 0 {
            continue;
        }
        let label = match idx {
            RegionIndex::Bar(n) => format!("BAR{n}"),
            _ => "ROM".to_string(),
        };
        let path = if r.areas.is_empty() {
            "through the server".to_string()
        } else if r.areas == [(0, r.info.size)] {
            "mapped by the client from the device fd".to_string()
        } else {
            let a: Vec<String> = r
                .areas
                .iter()
                .map(|(o, l)| format!("{o:#x}+{l:#x}"))
                .collect();
            format!(
                "mapped by the client at {}, the rest through the server",
                a.join(" ")
            )
        };
        bars.push(format!("{label} {} {path}", ByteSize(r.info.size)));
    }
    let _ = writeln!(s, "  {}", bars.join("; "));
    if let Some(m) = v.msix_trap() {
        let _ = writeln!(
            s,
            "  MSI-X table BAR{} {:#x}..{:#x}, PBA BAR{} {:#x}..{:#x}: the client emulates them; \
             accesses through the server are refused",
            m.table.0, m.table.1.start, m.table.1.end, m.pba.0, m.pba.1.start, m.pba.1.end
        );
    }
    if !v.resettable() {
        let _ = writeln!(
            s,
            "  no function reset (VFIO_DEVICE_FLAGS_RESET unset): between clients interrupts \
             are unwired and DMA unmapped, the device is not reset"
        );
    }
    s + &irqs
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let sourced = args.specs()?;
    let mut prepared = Vec::new();
    for (i, s) in sourced.iter().enumerate() {
        prepared.push(prepare(
            &gpu_label(i, &s.origin),
            &s.spec,
            &args.sysfs_root,
        )?);
    }
    let specs: Vec<&GpuSpec> = sourced.iter().map(|s| &s.spec).collect();
    // Signals are caught before any socket exists, so none is left behind.
    let mut signals =
        Signals::new([SIGTERM, SIGINT, SIGHUP]).context("installing signal handlers")?;
    let mut handles: Vec<ServeHandle> = Vec::new();
    for (i, (spec, gpu)) in specs.iter().zip(prepared).enumerate() {
        let name = format!("gpu{i}");
        let label = name.clone();
        let verbose = args.verbose;
        let sink: serve::EventSink = Arc::new(move |e: ServeEvent| {
            if verbose || !e.is_routine() {
                // Not eprintln!: it panics when stderr is gone, and this runs
                // on the server's threads.
                let _ = writeln!(std::io::stderr(), "p2p-host serve: {label}: {e}");
            }
        });
        // The banner is printed once the socket is bound: what it announces exists.
        let mode = args.socket_mode;
        let (banner, handle) = match gpu {
            Prepared::Captured(gpu) => (
                describe_captured(&name, spec, &gpu),
                serve::start_with_mode(gpu, &spec.socket, mode, sink),
            ),
            Prepared::Vfio(gpu) => (
                describe_vfio(&name, spec, &gpu),
                serve::start_with_mode(gpu, &spec.socket, mode, sink),
            ),
        };
        let handle = handle.with_context(|| gpu_label(i, &sourced[i].origin))?;
        eprint!("{banner}");
        handles.push(handle);
    }
    eprintln!(
        "p2p-host serve: ready: {} GPU(s) listening ({}); one client per socket, a second one is \
         refused with EBUSY",
        handles.len(),
        handles
            .iter()
            .map(|h| h.socket().display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(sig) = signals.forever().next() {
        eprintln!("p2p-host serve: signal {sig}: stopping and removing the sockets");
    }
    // All are asked to stop first, then each is waited for: they stop together.
    for h in &mut handles {
        h.stop();
    }
    for h in handles {
        h.shutdown();
    }
    Ok(())
}
