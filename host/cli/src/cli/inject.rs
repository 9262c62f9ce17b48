//! `p2p-host inject`: the virtual config space a guest would read, with the P2P
//! capability laid over a captured config (a sysfs `config` file or a dump).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use p2p_host::overlay::{ConfigOverlay, ConfigPatch, OverlayOptions, Placement, PlacementAction};
use p2p_topology::Clique;
use serde::Serialize;

#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Captured config space (raw bytes, at least 256: e.g. a sysfs `config` read as root).
    #[arg(long, value_name = "IN")]
    config: PathBuf,
    /// Clique id, 0..=15.
    #[arg(long, value_name = "N")]
    clique: u8,
    /// Where to write the virtual config space (raw bytes, as long as IN).
    #[arg(long, value_name = "OUT")]
    out: PathBuf,
    /// Accept a function that is not an NVIDIA display controller.
    #[arg(long)]
    allow_non_nvidia: bool,
    /// When 0xC8 and 0xD4 are both occupied, use the first free dword from
    /// 0x40 (neither QEMU nor Cloud Hypervisor would; refused by default).
    #[arg(long)]
    any_offset: bool,
    /// Print the placement as JSON (schema vp2p.inject/1).
    #[arg(long)]
    json: bool,
    /// Let OUT be IN (overwrite the captured config with the virtual one).
    #[arg(long)]
    force: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct InjectReport<'a> {
    schema: &'static str,
    input: &'a Path,
    output: &'a Path,
    length: usize,
    placement: &'a Placement,
    /// The byte that now points to the capability (a next pointer or 0x34).
    #[serde(with = "p2p_topology::hex::opt_u8")]
    #[schemars(with = "Option<p2p_topology::hex::Hex>")]
    pointer_offset: Option<u8>,
    cap_pointer_changed: bool,
    status_changed: bool,
    patches: Vec<ConfigPatch>,
}

pub fn run(args: InjectArgs) -> anyhow::Result<()> {
    let input = &args.config;
    let same = args.out == *input
        || matches!((input.canonicalize(), args.out.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if same && !args.force {
        anyhow::bail!(
            "--out {} is the captured config itself: writing it would lose the device's own \
             bytes; choose another file, or pass --force",
            args.out.display()
        );
    }
    let clique = Clique::new(args.clique).context("--clique")?;
    let physical = std::fs::read(input).with_context(|| format!("reading {}", input.display()))?;
    let options = OverlayOptions {
        allow_non_nvidia: args.allow_non_nvidia,
        any_offset: args.any_offset,
    };
    let overlay = ConfigOverlay::new(&physical, clique, options)
        .with_context(|| format!("{}: cannot place the P2P capability", input.display()))?;
    let mut virt = vec![0u8; physical.len()];
    overlay
        .read(0, &mut virt)
        .with_context(|| format!("{}: reading the virtual config", input.display()))?;
    std::fs::write(&args.out, &virt).with_context(|| format!("writing {}", args.out.display()))?;
    let report = InjectReport {
        schema: "vp2p.inject/1",
        input,
        output: &args.out,
        length: virt.len(),
        placement: overlay.placement(),
        pointer_offset: overlay.placement().pointer_offset(),
        cap_pointer_changed: overlay.placement().cap_pointer_changed(),
        status_changed: overlay.placement().status_changed(),
        patches: overlay.patches(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
    }
    Ok(())
}

fn render_text(r: &InjectReport<'_>) -> String {
    let p = r.placement;
    let mut s = String::new();
    let hex = |b: &[u8]| {
        b.iter()
            .map(|x| format!("{x:02x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let action = match p.action {
        PlacementAction::Injected => "injected",
        PlacementAction::AlreadyPresent => "already present, kept unchanged",
    };
    let _ = writeln!(
        s,
        "{} -> {} ({} bytes)",
        r.input.display(),
        r.output.display(),
        r.length
    );
    let _ = writeln!(
        s,
        "{:<12}{:#04x}, clique {}, {action}",
        "capability", p.offset, p.clique
    );
    let dw0 = u32::from_le_bytes(p.capability[..4].try_into().unwrap_or_default());
    let dw1 = u32::from_le_bytes(p.capability[4..].try_into().unwrap_or_default());
    let _ = writeln!(
        s,
        "{:<12}{}  (DW0 {dw0:#010x}, DW1 {dw1:#010x})",
        "bytes",
        hex(&p.capability)
    );
    let linked = match p.linked_after {
        Some(l) => format!(
            "after capability {:#04x} at {:#04x}: next pointer at {:#04x} {:#04x} -> {:#04x}",
            l.id, l.offset, l.next.offset, l.next.old, l.next.new
        ),
        None if p.cap_pointer.is_some() => "first in a list that was empty".into(),
        None => "-".into(),
    };
    let _ = writeln!(s, "{:<12}{linked}", "linked");
    let change = |b: Option<p2p_host::overlay::BytePatch>| match b {
        Some(b) => format!("{:#04x} -> {:#04x}", b.old, b.new),
        None => "unchanged".into(),
    };
    let _ = writeln!(s, "{:<12}{}", "0x34", change(p.cap_pointer));
    let _ = writeln!(s, "{:<12}{}", "status 0x06", change(p.status));
    if p.rejected.is_empty() {
        let _ = writeln!(s, "{:<12}none", "rejected");
    } else {
        for (i, rej) in p.rejected.iter().enumerate() {
            let label = if i == 0 { "rejected" } else { "" };
            let _ = writeln!(s, "{label:<12}{rej}");
        }
    }
    if let Some(bts) = p.bts_offset {
        let _ = writeln!(
            s,
            "{:<12}the driver's BTS capability at {bts:#04x}, kept intact",
            "kept"
        );
    }
    if !r.patches.is_empty() {
        let _ = writeln!(s, "{:<12}{:<8}{:<12}value", "patches", "dword", "mask");
        for q in &r.patches {
            let (offset, mask) = (format!("{:#04x}", q.offset), format!("{:#010x}", q.mask));
            let _ = writeln!(s, "{:<12}{offset:<8}{mask:<12}{:#010x}", "", q.value);
        }
    }
    s
}
