//! `p2p-guest nccl-topo explain`: the facts NCCL takes from this VM (GPUs,
//! their sysfs places, NICs, NVLinks, the CPU, the variables and nccl.conf),
//! the file it will load, and NCCL's verdicts on them
//! ([`p2p_nccl`]), set against the driver's decisions.
//!
//! One pipeline, [`explain`]: inputs and what-ifs in, one report out; the
//! command and `doctor` both call it. [`confirm`] then runs NCCL itself on
//! the same facts, and [`text`] writes the report for people.

pub mod confirm;
pub mod text;

use std::fs;
use std::path::PathBuf;

use p2p_nccl::env::{parse_conf, Setting};
use p2p_nccl::loader::LoaderRefusal;
use p2p_nccl::{
    CpuIdentity, DriverP2p, GpuVerdict, Graph, NcclEnv, PairVerdict, TopoXml, Transport, VmFacts,
};
use p2p_topology::nccl_topo::render;
use p2p_topology::Bdf;
use serde::{Deserialize, Serialize};

use super::loader::loader_refusals;
pub use super::vm_facts::{read_cpu, vm_facts};
use super::NcclTopoError;
use crate::decide::Verdict;
use crate::probe::report::ProbeReport;

/// Schema name of the JSON report.
pub const EXPLAIN_SCHEMA: &str = "vp2p.nccl-explain/1";
/// The NCCL release whose rules are applied.
pub const NCCL_RULES_VERSION: &str = "2.28.3";

/// The file NCCL will load, and why that one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileChoice {
    /// The path; None when NCCL loads no file and reads sysfs alone.
    pub path: Option<String>,
    /// `--file`, `NCCL_TOPO_FILE (environment)`, `NCCL's default path`, or why none.
    pub why: String,
}

/// One pair: NCCL's verdict and the driver's decision beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExplainedPair {
    /// NCCL's verdict.
    #[serde(flatten)]
    pub nccl: PairVerdict,
    /// What `probe` decided for the pair (enable, disable, unknown) and why.
    pub driver_decision: Option<String>,
}

/// `p2p-guest nccl-topo explain`'s report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ExplainReport {
    /// Always `vp2p.nccl-explain/1`.
    pub schema: String,
    /// Whose rules: `2.28.3`.
    pub nccl_rules: String,
    /// The file NCCL loads.
    pub file: FileChoice,
    /// What-if options applied (`--assume-clique`, `--hide-nvlink`).
    pub what_if: Vec<String>,
    /// Every NCCL variable set, with its source.
    pub variables: Vec<Setting>,
    /// The CPU NCCL sees (the file's `<cpu>`, else this machine's).
    pub cpu: CpuIdentity,
    /// Where NCCL placed each GPU and NIC from, what it dropped and filled.
    pub notes: Vec<String>,
    /// Per GPU pair.
    pub pairs: Vec<ExplainedPair>,
    /// Per GPU: its NIC and GPUDirect RDMA.
    pub gpus: Vec<GpuVerdict>,
    /// Where NCCL and the driver disagree, with what to change.
    pub mismatches: Vec<String>,
    /// What NCCL itself did (`--confirm`); None without it.
    pub confirm: Option<Confirmation>,
    /// Why NCCL refuses the file at initialisation (its loader, with the
    /// line of NCCL's source); every pair is then `ERROR`. Empty when NCCL
    /// accepts the file, or loads none.
    #[serde(default)]
    pub loader_refusals: Vec<LoaderRefusal>,
}

/// Each NCCL verdict beside the driver's decision for its pair, from `answers`.
pub fn beside_driver(
    verdicts: Vec<PairVerdict>,
    answers: &dyn Fn(Bdf, Bdf) -> (DriverP2p, Option<String>),
) -> Vec<ExplainedPair> {
    verdicts
        .into_iter()
        .map(|p| {
            let driver_decision = answers(p.a, p.b).1;
            ExplainedPair {
                nccl: p,
                driver_decision,
            }
        })
        .collect()
}

impl ExplainReport {
    /// The report of `pairs` and `gpus` for `file`, its mismatches
    /// computed; what-ifs, notes, `--confirm` and refusals empty for the
    /// caller to fill.
    pub fn new(
        file: FileChoice,
        env: &NcclEnv,
        cpu: CpuIdentity,
        pairs: Vec<ExplainedPair>,
        gpus: Vec<GpuVerdict>,
    ) -> Self {
        Self {
            schema: EXPLAIN_SCHEMA.into(),
            nccl_rules: NCCL_RULES_VERSION.into(),
            mismatches: mismatches(&pairs, &file),
            file,
            what_if: Vec::new(),
            variables: env.settings.clone(),
            cpu,
            notes: Vec::new(),
            pairs,
            gpus,
            confirm: None,
            loader_refusals: Vec::new(),
        }
    }
}

/// What `--confirm` saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Confirmation {
    /// NCCL's version line.
    pub nccl_version: Option<String>,
    /// Channel connections read from NCCL's output.
    pub channels: usize,
    /// Pairs whose every channel used the predicted transport (`a-b`).
    pub confirmed: Vec<String>,
    /// Pairs NCCL opened no channel between: nothing known, not a difference.
    pub not_connected: Vec<String>,
    /// Where NCCL and the prediction differ; empty when they agree.
    pub differences: Vec<String>,
    /// NCCL's debug output and topology dump, kept for the record.
    pub kept_in: String,
}

/// Where explain reads its facts.
#[derive(Debug, Clone)]
pub struct ExplainInputs {
    /// The sysfs tree.
    pub sysfs_root: PathBuf,
    /// `--file`: explain this file regardless of the environment.
    pub file: Option<PathBuf>,
    /// NCCL's default path (`/var/run/nvidia-topologyd/virtualTopology.xml`).
    pub default_path: PathBuf,
    /// `/proc/cpuinfo`.
    pub cpuinfo: PathBuf,
    /// The process environment (name, value).
    pub environment: Vec<(String, String)>,
}

/// Which file NCCL loads (src/graph/topo.cc, `ncclTopoGetSystem`):
/// `NCCL_TOPO_FILE` when set (a missing file is an error there), else the
/// default path when it exists, else none.
pub fn choose_file(inputs: &ExplainInputs, env: &NcclEnv) -> FileChoice {
    if let Some(f) = &inputs.file {
        return FileChoice {
            path: Some(f.display().to_string()),
            why: "given with --file".into(),
        };
    }
    if let Some(s) = env.get("NCCL_TOPO_FILE") {
        return FileChoice {
            path: Some(s.value.clone()),
            why: format!("NCCL_TOPO_FILE ({})", s.source),
        };
    }
    if inputs.default_path.is_file() {
        return FileChoice {
            path: Some(inputs.default_path.display().to_string()),
            why: "NCCL's default path (NCCL_TOPO_FILE unset)".into(),
        };
    }
    FileChoice {
        path: None,
        why: format!(
            "none: NCCL_TOPO_FILE unset and {} absent, so NCCL reads the PCI tree from sysfs",
            inputs.default_path.display()
        ),
    }
}

/// The NCCL variables from the environment, then `NCCL_CONF_FILE` or
/// `~/.nccl.conf`, then `/etc/nccl.conf` (NCCL's `initEnv`).
pub fn read_env(environment: &[(String, String)]) -> NcclEnv {
    let mut items: Vec<(String, String, String)> = environment
        .iter()
        .map(|(k, v)| (k.clone(), v.clone(), "environment".to_string()))
        .collect();
    let get = |k: &str| {
        environment
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    };
    let user = get("NCCL_CONF_FILE").or_else(|| get("HOME").map(|h| format!("{h}/.nccl.conf")));
    for f in user.into_iter().chain(["/etc/nccl.conf".to_string()]) {
        if let Ok(t) = fs::read_to_string(&f) {
            for (k, v) in parse_conf(&t) {
                items.push((k, v, f.clone()));
            }
        }
    }
    NcclEnv::from_sources(
        items
            .iter()
            .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str())),
    )
}

/// The driver's answer for a pair from the probe: CUDA's own when it was
/// asked, else the probe's decision from the capability and NVLink.
pub fn driver_answer(probe: &ProbeReport, a: Bdf, b: Bdf) -> (DriverP2p, Option<String>) {
    let Some(d) = probe.decision(a, b) else {
        return (DriverP2p::Unknown, None);
    };
    let said = format!("{:?}: {}", d.verdict, d.reasons.join(", ")).to_lowercase();
    if let Some([ab, ba]) = d.cuda {
        let ok = ab.can_access && ba.can_access;
        return (
            if ok {
                DriverP2p::Allowed
            } else {
                DriverP2p::Refused
            },
            Some(format!(
                "CUDA: peer access {}; {said}",
                if ok { "allowed" } else { "refused" }
            )),
        );
    }
    let v = match d.verdict {
        Verdict::Enable => DriverP2p::Allowed,
        Verdict::Disable => DriverP2p::Refused,
        Verdict::Unknown => DriverP2p::Unknown,
    };
    (v, Some(said))
}

/// Disagreements between the driver and NCCL, each with what to change.
pub fn mismatches(pairs: &[ExplainedPair], file: &FileChoice) -> Vec<String> {
    let mut out = Vec::new();
    for p in pairs {
        let v = &p.nccl;
        let why = p.driver_decision.clone().unwrap_or_default();
        match (v.driver, v.transport) {
            (DriverP2p::Allowed, Transport::Shm | Transport::Net) if !v.topology_allows_p2p => {
                let fix = match &file.path {
                    None => "install the file (`p2p-guest nccl-topo install`, or `p2p-guest nccl-topo --install` from the cliques)".to_string(),
                    Some(f) => format!("the file in force ({f}) puts them at {}; write it from the cliques (`p2p-guest nccl-topo`)", v.path),
                };
                out.push(format!(
                    "the driver enables P2P for {}-{} ({why}), NCCL will not ({} beyond {}): {fix}",
                    v.a, v.b, v.path, v.p2p_level
                ));
            }
            (DriverP2p::Refused, t) if v.topology_allows_p2p => out.push(format!(
                "NCCL's topology allows P2P for {}-{} ({} within {}) but the driver refuses it ({why}): NCCL uses {t}; {}",
                v.a,
                v.b,
                v.path,
                v.p2p_level,
                if file.path.is_some() {
                    "the file groups GPUs the hypervisor did not put in one clique"
                } else {
                    "give the GPUs a clique on the host (`p2p-host plan`)"
                }
            )),
            _ => {}
        }
    }
    out
}

/// The CPU NCCL decides with: the first `<cpu>` of the effective system,
/// else `fallback` (this machine's).
pub fn decided_cpu(xml: &TopoXml, fallback: &CpuIdentity) -> CpuIdentity {
    match xml.cpus.first() {
        Some(c) => CpuIdentity {
            arch: c.arch.clone().unwrap_or_else(|| fallback.arch.clone()),
            vendor: c.vendor.clone(),
            familyid: c.familyid,
            modelid: c.modelid,
        },
        None => fallback.clone(),
    }
}

/// What-ifs: explain another file than the one in force, or NCCL's PCIe
/// decision with NVLink hidden.
#[derive(Debug, Clone, Default)]
pub struct WhatIf {
    /// `--assume-clique`: the file `p2p-guest nccl-topo --assume-clique`
    /// would write, with each GPU in the clique given.
    pub assume_clique: Vec<(Bdf, u8)>,
    /// `--hide-nvlink`: NVLink hidden from NCCL (its placeholder `<nvlink>`
    /// under each GPU).
    pub hide_nvlink: bool,
}

/// An explanation: the report, and the facts `--confirm` runs NCCL on.
#[derive(Debug, Clone)]
pub struct Explained {
    /// The report, as the command prints it.
    pub report: ExplainReport,
    /// The facts the prediction was made on (this VM's, or the file's
    /// outside a VM); None when NCCL refuses the file.
    pub facts: Option<VmFacts>,
    /// The text of a what-if file (`--assume-clique`), which NCCL must load
    /// in place of the file in force; None otherwise.
    pub derived: Option<String>,
}

impl Explained {
    /// NCCL refuses the file at initialisation: every pair is `ERROR`.
    pub fn refused(&self) -> bool {
        !self.report.loader_refusals.is_empty()
    }
}

/// The text of the file NCCL will load; None when it loads none.
fn load(inputs: &ExplainInputs, choice: &FileChoice) -> Result<Option<String>, NcclTopoError> {
    let Some(path) = &choice.path else {
        return Ok(None);
    };
    fs::read_to_string(path)
        .map(Some)
        .map_err(|e| NcclTopoError::Io {
            path: PathBuf::from(path),
            why: format!(
                "cannot be read ({}){}: {e}",
                choice.why,
                if inputs.file.is_none() {
                    "; NCCL stops at initialisation when NCCL_TOPO_FILE names a file it cannot read"
                } else {
                    ""
                }
            ),
        })
}

/// What NCCL will do with the file in force (or the what-if's) in this VM,
/// beside the driver's answers from `probe`. With no GPU in the VM, only a
/// `--file` is explained, as NCCL would read it in a VM that matches it;
/// else the error is [`NcclTopoError::NoGpu`]. A file NCCL's loader refuses
/// gives a report whose every pair is `ERROR` ([`Explained::refused`]).
pub fn explain(
    inputs: &ExplainInputs,
    what_if: &WhatIf,
    probe: &ProbeReport,
) -> Result<Explained, NcclTopoError> {
    let env = read_env(&inputs.environment);
    let mut applied = Vec::new();
    let (choice, derived) = if what_if.assume_clique.is_empty() {
        (choose_file(inputs, &env), None)
    } else {
        let (system, _) = super::derive(&inputs.sysfs_root, &what_if.assume_clique)?;
        let list: Vec<String> = what_if
            .assume_clique
            .iter()
            .map(|(b, c)| format!("{b}={c}"))
            .collect();
        applied.push(format!("--assume-clique {}", list.join(" ")));
        let choice = FileChoice {
            path: None,
            why: "what-if: the file `p2p-guest nccl-topo --assume-clique` would write".into(),
        };
        (choice, Some(render(&system)))
    };
    let text = match &derived {
        Some(t) => Some(t.clone()),
        None => load(inputs, &choice)?,
    };
    if what_if.hide_nvlink {
        applied.push("--hide-nvlink".into());
    }
    let cpu = read_cpu(&inputs.cpuinfo);
    let in_vm = !probe.gpus.is_empty();
    if !in_vm && (text.is_none() || inputs.file.is_none()) {
        return Err(NcclTopoError::NoGpu(crate::probe::sysfs::resolve_root(
            &inputs.sysfs_root,
        )));
    }
    let vm = match in_vm {
        true => Some(vm_facts(&inputs.sysfs_root, probe, cpu.clone())?),
        false => None,
    };
    let answers = |x: Bdf, y: Bdf| match in_vm {
        true => driver_answer(probe, x, y),
        false => (
            DriverP2p::Unknown,
            Some("no VM here: taken as allowed".into()),
        ),
    };
    // NCCL's loader first: a file it refuses is reported as its refusal.
    let refusals = text
        .as_deref()
        .map(|t| loader_refusals(t, &inputs.sysfs_root, vm.as_ref(), &cpu))
        .unwrap_or_default();
    if !refusals.is_empty() {
        let order: Vec<Bdf> = match &vm {
            Some(f) => f.gpus.iter().map(|g| g.busid).collect(),
            None => p2p_nccl::loader::file_gpus(text.as_deref().unwrap_or_default()),
        };
        let pred =
            p2p_nccl::loader::refused_prediction(&order, &refusals, &env, &|a, b| answers(a, b).0);
        let pairs = beside_driver(pred.pairs, &answers);
        let mut report = ExplainReport::new(choice, &env, cpu, pairs, pred.gpus);
        report.what_if = applied;
        report.loader_refusals = refusals;
        return Ok(Explained {
            report,
            facts: None,
            derived,
        });
    }
    let xml = match &text {
        None => None,
        Some(t) => Some(p2p_nccl::parse(t).map_err(|e| NcclTopoError::Io {
            path: PathBuf::from(choice.path.as_deref().unwrap_or("derived file")),
            why: e.to_string(),
        })?),
    };
    let facts = match (vm, &xml) {
        (Some(f), _) => f,
        (None, Some(x)) => VmFacts::from_file(x, cpu.clone()),
        (None, None) => {
            return Err(NcclTopoError::NoGpu(crate::probe::sysfs::resolve_root(
                &inputs.sysfs_root,
            )))
        }
    };
    let mut eff = p2p_nccl::effective(xml.as_ref(), &facts);
    if what_if.hide_nvlink {
        p2p_nccl::fill::hide_nvlink(&mut eff);
    }
    let order: Vec<Bdf> = facts.gpus.iter().map(|g| g.busid).collect();
    let pred = p2p_nccl::predict(&Graph::build(&eff.xml), &env, &order, &|x, y| {
        answers(x, y).0
    });
    let pairs = beside_driver(pred.pairs, &answers);
    let mut report =
        ExplainReport::new(choice, &env, decided_cpu(&eff.xml, &cpu), pairs, pred.gpus);
    report.what_if = applied;
    report.notes = eff.notes;
    Ok(Explained {
        report,
        facts: Some(facts),
        derived,
    })
}
