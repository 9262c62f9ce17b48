//! `p2p-guest nccl-topo explain`: what NCCL will do in this VM, and why.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use p2p_guest::nccl_topo::explain::{self, Confirmation, ExplainInputs, ExplainReport, FileChoice};
use p2p_guest::nccl_topo::{self, NcclTopoError};
use p2p_guest::probe::{self, ProbeOptions};
use p2p_nccl::Graph;
use p2p_report::Table;
use p2p_topology::nccl_topo::{render, NCCL_DEFAULT_PATH};
use p2p_topology::Bdf;

/// Exit status when the VM has no GPU and no --file was given.
pub const NO_GPU_EXIT: i32 = 2;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// sysfs tree to read (the live /sys, or a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Explain this file as NCCL would read it, whatever NCCL_TOPO_FILE says;
    /// outside a VM (no GPU in the sysfs tree), as NCCL would read it in a VM
    /// that matches it.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Where NCCL looks when NCCL_TOPO_FILE is unset.
    #[arg(long, value_name = "PATH", default_value = NCCL_DEFAULT_PATH)]
    default_path: PathBuf,
    /// CPU identity (vendor_id, cpu family, model) NCCL reads from cpuid.
    #[arg(long, value_name = "PATH", default_value = "/proc/cpuinfo")]
    cpuinfo: PathBuf,
    /// Do not ask CUDA and NVML (the driver's answers then come from the
    /// capability and are marked as such).
    #[arg(long)]
    no_driver: bool,
    /// What-if: explain the file `p2p-guest nccl-topo --assume-clique` would
    /// write, with GPU BDF in clique N; repeatable.
    #[arg(long, value_name = "BDF=N", value_parser = super::nccl_topo::parse_assume)]
    assume_clique: Vec<(Bdf, u8)>,
    /// What-if: NVLink hidden from NCCL (its placeholder `<nvlink>` under each
    /// GPU), so an NVLink machine shows NCCL's PCIe decision.
    #[arg(long)]
    hide_nvlink: bool,
    /// Print a JSON report (schema vp2p.nccl-explain/1) instead of tables.
    #[arg(long)]
    json: bool,
    /// Initialise NCCL over every GPU this process may use (one process; a
    /// 1 MiB all-reduce, then a send and a receive between every ordered
    /// pair) with the file explained, read back the transport of every
    /// pair's channels from NCCL's own debug output and compare; any
    /// difference exits 1.
    #[arg(long, conflicts_with = "hide_nvlink")]
    confirm: bool,
}

/// Runs NCCL in a child process of this binary (`nccl-topo confirm-run`) so
/// that its variables are set before NCCL starts, never in this process.
fn confirm(
    file: Option<&std::path::Path>,
    facts: &p2p_nccl::VmFacts,
    pred: &p2p_nccl::Prediction,
) -> anyhow::Result<Confirmation> {
    let order: Vec<Bdf> = facts.gpus.iter().map(|g| g.busid).collect();
    let dir = std::env::temp_dir().join(format!("vp2p-confirm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("finding this binary")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["nccl-topo", "confirm-run"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,P2P,SHM,NET,ENV")
        .env("NCCL_TOPO_DUMP_FILE", dir.join("nccl-topo-dump.xml"));
    if let Some(f) = file {
        cmd.env("NCCL_TOPO_FILE", f);
    }
    eprintln!("confirm: starting NCCL over {} GPU(s)...", order.len());
    let out = cmd.output().context("running NCCL")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(dir.join("nccl-debug.txt"), &text)
        .with_context(|| format!("writing {}", dir.display()))?;
    if !out.status.success() {
        anyhow::bail!(
            "NCCL failed ({}); its output is in {}",
            out.status,
            dir.join("nccl-debug.txt").display()
        );
    }
    let seen = p2p_nccl::observed::parse_log(&text);
    let mut check = p2p_nccl::observed::check_pairs(pred, &seen, &order);
    check
        .differences
        .extend(against_dump(&dir.join("nccl-topo-dump.xml"), facts, pred)?);
    Ok(Confirmation {
        nccl_version: seen.version.clone(),
        channels: seen.channels.len(),
        confirmed: check.confirmed,
        not_connected: check.not_connected,
        differences: check.differences,
        kept_in: dir.display().to_string(),
    })
}

fn against_dump(
    dump: &std::path::Path,
    facts: &p2p_nccl::VmFacts,
    pred: &p2p_nccl::Prediction,
) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(dump)
        .with_context(|| format!("NCCL wrote no dump at {}", dump.display()))?;
    explain::against_dump(&text, facts, pred)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dump.display()))
}

/// `nccl-topo confirm-run`: one communicator over every GPU this process
/// may use, a small all-reduce, then a send and a receive between every
/// ordered pair (as an all-to-all does) so that NCCL opens a channel between
/// every pair, not only between its rings' neighbours. NCCL's variables are
/// already set by the parent.
pub fn confirm_run() -> anyhow::Result<()> {
    let cuda = p2p_guest::cuda::Cuda::open()?;
    let n = cuda.gpus.len();
    let rig = p2p_guest::cuda::rig::Rig::new(cuda.gpus)?;
    let mut ar = p2p_guest::bench::nccl::AllReduce::new(&rig, 1 << 20)?;
    ar.timed(&rig, 1 << 20, 2)?;
    let bad = ar.verify(&rig, 1 << 20)?;
    println!(
        "vp2p-confirm: {n} rank(s), all-reduce {}",
        if bad == 0 { "verified" } else { "WRONG" }
    );
    if bad != 0 {
        anyhow::bail!("{bad} element(s) of the all-reduce differ from the expected sum");
    }
    let pairs = ar.exchange_every_pair(&rig, PAIR_BLOCK_BYTES)?;
    println!(
        "vp2p-confirm: {} ordered pair(s) exchanged {} KiB each, {}",
        pairs.transfers,
        PAIR_BLOCK_BYTES >> 10,
        if pairs.mismatches == 0 {
            "verified"
        } else {
            "WRONG"
        }
    );
    if pairs.mismatches != 0 {
        anyhow::bail!(
            "{} element(s) received between pairs differ from what was sent",
            pairs.mismatches
        );
    }
    Ok(())
}

/// Bytes each rank sends to each other rank in the pair exchange.
const PAIR_BLOCK_BYTES: u64 = 256 << 10;

/// The text of the file NCCL will load; None when it loads none.
fn load(inputs: &ExplainInputs, choice: &FileChoice) -> anyhow::Result<Option<String>> {
    let Some(path) = &choice.path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "{path} ({}): cannot be read{}",
            choice.why,
            if inputs.file.is_none() {
                "; NCCL stops at initialisation when NCCL_TOPO_FILE names a file it cannot read"
            } else {
                ""
            }
        )
    })?;
    Ok(Some(text))
}

pub fn run(a: ExplainArgs) -> anyhow::Result<()> {
    let environment: Vec<(String, String)> = std::env::vars().collect();
    let env = explain::read_env(&environment);
    let inputs = ExplainInputs {
        sysfs_root: a.sysfs_root.clone(),
        file: a.file.clone(),
        default_path: a.default_path.clone(),
        cpuinfo: a.cpuinfo.clone(),
        environment,
    };
    let (probe, _cuda) = probe::probe(
        &a.sysfs_root,
        &ProbeOptions {
            use_driver: !a.no_driver,
        },
    )
    .with_context(|| format!("reading the GPUs of {}", a.sysfs_root.display()))?;
    let mut what_if = Vec::new();
    let (choice, text) = if !a.assume_clique.is_empty() {
        let (system, _) = nccl_topo::derive(&a.sysfs_root, &a.assume_clique)?;
        let text = render(&system);
        let list: Vec<String> = a
            .assume_clique
            .iter()
            .map(|(b, c)| format!("{b}={c}"))
            .collect();
        what_if.push(format!("--assume-clique {}", list.join(" ")));
        (
            FileChoice {
                path: None,
                why: "what-if: the file `p2p-guest nccl-topo --assume-clique` would write".into(),
            },
            Some(text),
        )
    } else {
        let choice = explain::choose_file(&inputs, &env);
        let text = load(&inputs, &choice)?;
        (choice, text)
    };
    let cpu = explain::read_cpu(&a.cpuinfo);
    let in_vm = !probe.gpus.is_empty();
    if !in_vm && (text.is_none() || a.file.is_none()) {
        let root = p2p_guest::probe::sysfs::resolve_root(&a.sysfs_root);
        eprintln!(
            "p2p-guest: no NVIDIA GPU in {}: nothing for NCCL to do here (explain a file outside a VM with --file)",
            root.display()
        );
        std::process::exit(NO_GPU_EXIT);
    }
    let vm = if in_vm {
        Some(
            explain::vm_facts(&a.sysfs_root, &probe, cpu.clone())
                .map_err(|e: NcclTopoError| anyhow::anyhow!(e))?,
        )
    } else {
        None
    };
    let answers = |x: Bdf, y: Bdf| {
        if in_vm {
            explain::driver_answer(&probe, x, y)
        } else {
            (
                p2p_nccl::DriverP2p::Unknown,
                Some("no VM here: taken as allowed".into()),
            )
        }
    };
    if a.hide_nvlink {
        what_if.push("--hide-nvlink".into());
    }
    // NCCL's loader first: a file it refuses is reported as its refusal.
    let refusals = text
        .as_deref()
        .map(|t| nccl_topo::loader::loader_refusals(t, &a.sysfs_root, vm.as_ref(), &cpu))
        .unwrap_or_default();
    if !refusals.is_empty() {
        let order: Vec<Bdf> = match &vm {
            Some(f) => f.gpus.iter().map(|g| g.busid).collect(),
            None => p2p_nccl::loader::file_gpus(text.as_deref().unwrap_or_default()),
        };
        let (pairs, gpus) = nccl_topo::loader::refused_pairs(&order, &refusals, &env, &answers);
        if a.confirm {
            eprintln!("confirm: skipped: NCCL refuses the file at initialisation");
        }
        let mut report = ExplainReport::new(choice, &env, cpu, pairs, gpus);
        report.what_if = what_if;
        report.loader_refusals = refusals;
        print_report(&report, a.json)?;
        std::process::exit(1);
    }
    let xml = match &text {
        None => None,
        Some(t) => Some(p2p_nccl::parse(t).map_err(|e| match &choice.path {
            Some(path) => anyhow::anyhow!("{path}: {e}"),
            None => anyhow::anyhow!("derived file: {e}"),
        })?),
    };
    let facts = match (vm, &xml) {
        (Some(f), _) => f,
        (None, Some(x)) => explain::facts_from_file(x, cpu.clone()),
        (None, None) => anyhow::bail!("no GPU here and no file to explain"),
    };
    let mut eff = p2p_nccl::effective(xml.as_ref(), &facts);
    if a.hide_nvlink {
        p2p_nccl::fill::hide_nvlink(&mut eff);
    }
    let graph = Graph::build(&eff.xml);
    let order: Vec<Bdf> = facts.gpus.iter().map(|g| g.busid).collect();
    let pred = p2p_nccl::predict(&graph, &env, &order, &|x, y| answers(x, y).0);
    let pairs = explain::beside_driver(pred.pairs, &answers);
    let confirmation = if a.confirm {
        let derived;
        let file = if !a.assume_clique.is_empty() {
            let (system, _) = nccl_topo::derive(&a.sysfs_root, &a.assume_clique)?;
            derived = std::env::temp_dir().join(format!("vp2p-what-if-{}.xml", std::process::id()));
            std::fs::write(&derived, render(&system))
                .with_context(|| format!("writing {}", derived.display()))?;
            Some(derived.as_path())
        } else {
            choice.path.as_deref().map(std::path::Path::new)
        };
        let pred_again = p2p_nccl::Prediction {
            pairs: pairs.iter().map(|p| p.nccl.clone()).collect(),
            gpus: pred.gpus.clone(),
        };
        Some(confirm(file, &facts, &pred_again)?)
    } else {
        None
    };
    let mut report = ExplainReport::new(
        choice,
        &env,
        explain::decided_cpu(&eff.xml, &cpu),
        pairs,
        pred.gpus,
    );
    report.what_if = what_if;
    report.notes = eff.notes;
    report.confirm = confirmation.clone();
    print_report(&report, a.json)?;
    if confirmation.is_some_and(|c| !c.differences.is_empty()) {
        std::process::exit(1);
    }
    Ok(())
}

/// The report as JSON, or as tables with `--confirm`'s result after them.
fn print_report(report: &ExplainReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", render_text(report));
        if let Some(c) = &report.confirm {
            print!("{}", render_confirmation(c, report.pairs.len()));
        }
    }
    Ok(())
}

fn render_confirmation(c: &Confirmation, pairs: usize) -> String {
    let mut out = format!(
        "confirm: NCCL {} printed {} channel connection(s) (output kept in {})\n",
        c.nccl_version.as_deref().unwrap_or("(version not printed)"),
        c.channels,
        c.kept_in
    );
    if c.differences.is_empty() {
        out.push_str(&format!(
            "confirm: NCCL agrees with the prediction on {} of {pairs} pair(s)\n",
            c.confirmed.len()
        ));
    }
    for n in &c.not_connected {
        out.push_str(&format!("confirm: not connected: {n}\n"));
    }
    for d in &c.differences {
        out.push_str(&format!("CONFIRM MISMATCH: {d}\n"));
    }
    out
}

/// The report as tables and lists.
pub fn render_text(r: &ExplainReport) -> String {
    let mut out = format!(
        "NCCL {} rules\nfile: {}{}\n",
        r.nccl_rules,
        r.file
            .path
            .as_deref()
            .map_or(String::new(), |p| format!("{p}: ")),
        r.file.why
    );
    for w in &r.what_if {
        out.push_str(&format!("what-if: {w}\n"));
    }
    if r.variables.is_empty() {
        out.push_str("variables: none set\n");
    } else {
        for s in &r.variables {
            out.push_str(&format!("variable: {s}\n"));
        }
    }
    out.push_str(&format!(
        "cpu: {} {}{}\n",
        r.cpu.arch,
        r.cpu.vendor.as_deref().unwrap_or("(vendor unknown)"),
        match (r.cpu.familyid, r.cpu.modelid) {
            (Some(f), Some(m)) => format!(" family {f} model {m}"),
            _ => String::new(),
        }
    ));
    if !r.loader_refusals.is_empty() {
        out.push_str(
            "NCCL refuses this file at initialisation (ncclCommInitAll fails; it stops at the first):\n",
        );
        for f in &r.loader_refusals {
            out.push_str(&format!("  REFUSED {f}\n    why: {}\n", f.why));
        }
    }
    if !r.pairs.is_empty() {
        let mut t = Table::new(["PAIR", "PATH", "P2P LEVEL", "DRIVER", "NCCL", "DECIDED BY"]);
        for p in &r.pairs {
            let v = &p.nccl;
            t.row([
                format!("{}-{}", v.a, v.b),
                v.path.to_string(),
                v.p2p_level.to_string(),
                format!("{:?}", v.driver).to_lowercase(),
                v.transport.to_string(),
                if v.decided_by.is_empty() {
                    "defaults".into()
                } else {
                    v.decided_by.join("; ")
                },
            ]);
        }
        out.push('\n');
        out.push_str(&t.render());
    }
    let mut t = Table::new(["GPU", "NET", "NIC", "PATH", "GDR WRITE", "GDR READ"]);
    for g in &r.gpus {
        t.row([
            g.gpu.to_string(),
            g.net.clone().unwrap_or_else(|| "-".into()),
            g.nic.map_or("-".into(), |b| b.to_string()),
            g.path.map_or("-".into(), |p| p.to_string()),
            if g.gdr_write { "yes" } else { "no" }.into(),
            if g.gdr_read { "yes" } else { "no" }.into(),
        ]);
    }
    out.push('\n');
    out.push_str(&t.render());
    out.push_str("\nwhy:\n");
    for p in &r.pairs {
        out.push_str(&format!("  {}-{}:\n", p.nccl.a, p.nccl.b));
        for why in &p.nccl.reasons {
            out.push_str(&format!("    {why}\n"));
        }
    }
    for g in &r.gpus {
        out.push_str(&format!("  {}:\n", g.gpu));
        for why in &g.reasons {
            out.push_str(&format!("    {why}\n"));
        }
    }
    out.push_str("placed:\n");
    for n in &r.notes {
        out.push_str(&format!("  {n}\n"));
    }
    if !r.loader_refusals.is_empty() {
        out.push_str("NCCL does not initialise with this file: every pair ERROR\n");
    } else if r.mismatches.is_empty() {
        out.push_str("NCCL and the driver agree on every pair\n");
    } else {
        for m in &r.mismatches {
            out.push_str(&format!("MISMATCH: {m}\n"));
        }
    }
    out
}
