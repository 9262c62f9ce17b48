//! `explain --confirm`: NCCL itself, initialised over every GPU of this
//! process with the file explained, and its own debug output and topology
//! dump read back against the prediction.
//!
//! NCCL reads its variables once, at initialisation, so it runs in a child
//! process of this binary ([`confirm_run`], `nccl-topo confirm-run`) whose
//! environment is set before NCCL starts, never in the explaining process.

use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_nccl::{DriverP2p, Graph, NcclEnv, Prediction, VmFacts};
use p2p_topology::Bdf;

use super::{Confirmation, Explained};
use crate::bench::nccl::AllReduce;
use crate::cuda::rig::Rig;
use crate::cuda::{Cuda, CudaError};

/// Bytes each rank sends to each other rank in the pair exchange.
const PAIR_BLOCK_BYTES: u64 = 256 << 10;

/// Why NCCL could not be confirmed.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    /// NCCL refuses the file, so there is nothing to run.
    #[error("NCCL refuses the file at initialisation: nothing to confirm")]
    Refused,
    /// A file or directory of the run could not be written or read.
    #[error("{path}: {why}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
    /// The child running NCCL failed; its output is kept.
    #[error("NCCL failed ({status}); its output is in {log}")]
    NcclFailed {
        /// The child's exit status.
        status: String,
        /// Where its output was written.
        log: PathBuf,
    },
    /// CUDA or NCCL failed in the child.
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// NCCL's collective moved wrong data.
    #[error("{0}")]
    WrongData(String),
}

fn io(path: &Path, e: impl std::fmt::Display) -> ConfirmError {
    ConfirmError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// Runs NCCL on `explained`'s facts and file in a child process of this
/// binary, then checks every pair's channels against the prediction and
/// NCCL's own system (its dump) against the explained one. The output is
/// kept in a directory under `$TMPDIR` that the confirmation names.
pub fn confirm(explained: &Explained) -> Result<Confirmation, ConfirmError> {
    let facts = explained.facts.as_ref().ok_or(ConfirmError::Refused)?;
    let report = &explained.report;
    let pred = Prediction {
        pairs: report.pairs.iter().map(|p| p.nccl.clone()).collect(),
        gpus: report.gpus.clone(),
    };
    let order: Vec<Bdf> = facts.gpus.iter().map(|g| g.busid).collect();
    let dir = std::env::temp_dir().join(format!("vp2p-confirm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let file = match (&explained.derived, &report.file.path) {
        (Some(text), _) => {
            let derived = dir.join("what-if.xml");
            std::fs::write(&derived, text).map_err(|e| io(&derived, e))?;
            Some(derived)
        }
        (None, path) => path.as_ref().map(PathBuf::from),
    };
    let exe = std::env::current_exe().map_err(|e| io(Path::new("/proc/self/exe"), e))?;
    let mut cmd = Command::new(&exe);
    cmd.args(["nccl-topo", "confirm-run"])
        .env("NCCL_DEBUG", "INFO")
        .env("NCCL_DEBUG_SUBSYS", "INIT,GRAPH,P2P,SHM,NET,ENV")
        .env("NCCL_TOPO_DUMP_FILE", dir.join("nccl-topo-dump.xml"));
    if let Some(f) = &file {
        cmd.env("NCCL_TOPO_FILE", f);
    }
    eprintln!("confirm: starting NCCL over {} GPU(s)...", order.len());
    let out = cmd.output().map_err(|e| io(&exe, e))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let log = dir.join("nccl-debug.txt");
    std::fs::write(&log, &text).map_err(|e| io(&log, e))?;
    if !out.status.success() {
        return Err(ConfirmError::NcclFailed {
            status: out.status.to_string(),
            log,
        });
    }
    let seen = p2p_nccl::observed::parse_log(&text);
    let mut check = p2p_nccl::observed::check_pairs(&pred, &seen, &order);
    let dump_path = dir.join("nccl-topo-dump.xml");
    let dump = std::fs::read_to_string(&dump_path)
        .map_err(|e| io(&dump_path, format!("NCCL wrote no dump: {e}")))?;
    check
        .differences
        .extend(against_dump(&dump, facts, &pred).map_err(|e| io(&dump_path, e))?);
    Ok(Confirmation {
        nccl_version: seen.version.clone(),
        channels: seen.channels.len(),
        confirmed: check.confirmed,
        not_connected: check.not_connected,
        differences: check.differences,
        kept_in: dir.display().to_string(),
    })
}

/// `nccl-topo confirm-run`: one communicator over every GPU this process
/// may use, a small all-reduce, then a send and a receive between every
/// ordered pair (as an all-to-all does) so that NCCL opens a channel between
/// every pair, not only between its rings' neighbours. NCCL's variables are
/// already set by the parent.
pub fn confirm_run() -> Result<(), ConfirmError> {
    let cuda = Cuda::open()?;
    let n = cuda.gpus.len();
    let rig = Rig::new(cuda.gpus)?;
    let mut ar = AllReduce::new(&rig, 1 << 20)?;
    ar.timed(&rig, 1 << 20, 2)?;
    let bad = ar.verify(&rig, 1 << 20)?;
    println!(
        "vp2p-confirm: {n} rank(s), all-reduce {}",
        if bad == 0 { "verified" } else { "WRONG" }
    );
    if bad != 0 {
        return Err(ConfirmError::WrongData(format!(
            "{bad} element(s) of the all-reduce differ from the expected sum"
        )));
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
        return Err(ConfirmError::WrongData(format!(
            "{} element(s) received between pairs differ from what was sent",
            pairs.mismatches
        )));
    }
    Ok(())
}

/// The same rules applied to the system NCCL itself built (its
/// `NCCL_TOPO_DUMP_FILE` text) must give the predicted path for every pair
/// and the predicted net and GPUDirect RDMA for every GPU; each difference
/// is a line (NCCL built another system than the one explained).
pub fn against_dump(
    dump: &str,
    facts: &VmFacts,
    pred: &Prediction,
) -> Result<Vec<String>, p2p_nccl::TopoXmlError> {
    let xml = p2p_nccl::parse(dump)?;
    let mut f = facts.clone();
    f.nics.clear();
    f.nvlinks = None;
    let eff = p2p_nccl::effective(Some(&xml), &f);
    let order: Vec<Bdf> = facts.gpus.iter().map(|g| g.busid).collect();
    let theirs = p2p_nccl::predict(
        &Graph::build(&eff.xml),
        &NcclEnv::default(),
        &order,
        &|_, _| DriverP2p::Allowed,
    );
    let mut out = Vec::new();
    for (p, q) in pred.pairs.iter().zip(&theirs.pairs) {
        if p.path != q.path {
            out.push(format!(
                "{}-{}: predicted path {}, NCCL's own system has {}",
                p.a, p.b, p.path, q.path
            ));
        }
    }
    for (g, h) in pred.gpus.iter().zip(&theirs.gpus) {
        if (g.net.as_deref(), g.gdr_write) != (h.net.as_deref(), h.gdr_write) {
            out.push(format!(
                "{}: predicted net {} (GPUDirect RDMA {}), NCCL's own system gives {} ({})",
                g.gpu,
                g.net.as_deref().unwrap_or("none"),
                g.gdr_write,
                h.net.as_deref().unwrap_or("none"),
                h.gdr_write
            ));
        }
    }
    Ok(out)
}
