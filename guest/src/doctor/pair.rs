//! Judging one GPU and one pair: the facts side by side, the expected
//! figure, the ratio and the verdict with its reasons and causes.

use crate::doctor::bare_metal::{self, Link};
use p2p_report::bench::{BenchReport, Direction, Mode};
use p2p_topology::Bdf;

use super::{
    bench_index, figure, DoctorGpu, DoctorPair, ExpectedFigure, Inputs, Measured, SelfCheck,
    Verdict,
};
use crate::decide::{self, PeerDecision};
use crate::probe::pcie::{AtsView, GuestPcie};
use crate::probe::report::ProbeGpu;
use crate::probe::sysfs::CapabilityState;

/// Below this share of the expected one-way (or two-way) figure a pair is SLOW.
pub const SLOW_RATIO: f64 = 0.8;

/// Below this share of a baseline's latency (its latency over ours) a pair is SLOW.
pub const SLOW_RATIO_LATENCY: f64 = 0.5;

fn capability(c: &CapabilityState) -> String {
    match c {
        CapabilityState::Present { clique, offset } => {
            format!("clique {clique} (at {offset:#04x})")
        }
        CapabilityState::Absent => "absent".into(),
        CapabilityState::Invalid { why, .. } => format!("invalid: {why}"),
        CapabilityState::Unreadable { why } => format!("unreadable: {why}"),
    }
}

/// One GPU: its facts and, where measured, its check with itself.
pub fn gpu(inputs: &Inputs, g: &ProbeGpu) -> DoctorGpu {
    let own: Vec<_> = inputs
        .probe
        .verify
        .iter()
        .filter(|c| c.src == g.bdf && c.dst == g.bdf)
        .collect();
    let bench = inputs.bench.as_ref();
    let index = bench.and_then(|b| bench_index(b, g.bdf));
    let local = bench.zip(index).and_then(|(b, i)| {
        figure(
            b,
            Mode::Ce,
            Direction::Uni,
            (i, i),
            Some(b.method.headline_bytes),
        )
    });
    let self_check = (!own.is_empty() || local.is_some()).then(|| SelfCheck {
        data_checks: own.len() + usize::from(local.is_some()),
        data_ok: own.iter().filter(|c| c.ok()).count() + usize::from(local.is_some_and(|l| l.1)),
        local_ce_gbps: local.map(|l| l.0),
    });
    DoctorGpu {
        bdf: g.bdf,
        name: bench.zip(index).map_or_else(
            || format!("{}:{}", g.vendor, g.device),
            |(b, i)| b.gpus[i].name.clone(),
        ),
        capability: capability(&g.capability),
        clique: g.clique,
        cuda_ordinal: g.cuda_ordinal.map(|o| o.0),
        nvlinks: g.nvlink.as_ref().map(|l| l.active),
        pcie: g.pcie.as_ref().map(GuestPcie::summary),
        self_check,
    }
}

fn gts(s: &str) -> Option<f32> {
    s.trim_end_matches("GT/s").trim().parse().ok()
}

/// The pair's link: NVLink with the generation of its GPUs (from CUDA's
/// compute capability), else PCIe at what both ends' links can do.
fn link_of(inputs: &Inputs, d: &PeerDecision) -> Option<Link> {
    if let Some(n) = d.nvlinks {
        let bench = inputs.bench.as_ref()?;
        let i = bench_index(bench, d.a)?;
        let generation = Link::nvlink_generation(bench.gpus[i].compute_capability[0])?;
        return Some(Link::Nvlink {
            generation,
            links: n,
        });
    }
    let view = |b: Bdf| {
        let l = inputs
            .probe
            .gpus
            .iter()
            .find(|g| g.bdf == b)?
            .pcie
            .as_ref()?
            .link
            .clone()?;
        let speed = l
            .max_speed
            .as_deref()
            .and_then(gts)
            .or_else(|| gts(&l.speed))?;
        Some((Link::pcie_generation(speed)?, l.max_width.max(l.width)))
    };
    let (ga, wa) = view(d.a)?;
    let (gb, wb) = view(d.b)?;
    Some(Link::Pcie {
        generation: ga.min(gb),
        width: wa.min(wb),
    })
}

/// The baseline's figures for the pair at the same GPU indices (else its
/// first measured pair), at our copy size when it has it.
fn from_baseline(
    file: &str,
    base: &BenchReport,
    (ia, ib): (usize, usize),
    bytes: u64,
) -> Option<ExpectedFigure> {
    let size = |s, d| {
        [Some(bytes), Some(base.method.headline_bytes), None]
            .into_iter()
            .find_map(|b| figure(base, Mode::Ce, Direction::Uni, (s, d), b).map(|f| (f.0, b)))
    };
    let pairs: Vec<(usize, usize)> = std::iter::once((ia, ib))
        .chain(
            base.results
                .iter()
                .filter(|m| m.mode == Mode::Ce && m.direction == Direction::Uni)
                .filter_map(|m| Some((m.src?.0, m.dst?.0)))
                .filter(|(s, d)| s != d),
        )
        .collect();
    let &(s, d) = pairs.iter().find(|(s, d)| size(*s, *d).is_some())?;
    let (ab, at) = size(s, d)?;
    let ba = size(d, s).map(|x| x.0);
    let uni = ba.map_or(ab, |ba| ab.min(ba));
    let (lo, hi) = (s.min(d), s.max(d));
    let bi = figure(base, Mode::Ce, Direction::Bi, (lo, hi), at).map(|f| f.0);
    let lat = [(s, d), (d, s)]
        .into_iter()
        .filter_map(|p| figure(base, Mode::Pingpong, Direction::Uni, p, None).map(|f| f.0))
        .reduce(f64::max);
    Some(ExpectedFigure {
        from: "baseline".into(),
        uni_gbps: uni,
        bi_gbps: bi,
        latency_us: lat,
        raw_gbps: None,
        source: format!(
            "{file}: GPU{s}<->GPU{d} of \"{}\" on {} ({})",
            base.label,
            base.machine.hostname,
            base.gpus.get(s).map_or("?", |g| g.name.as_str())
        ),
        date: "not recorded in vp2p.bench/1 documents".into(),
        note: format!(
            "the baseline's copy engine at {}{}",
            at.map_or_else(
                || "its only size".into(),
                |b| p2p_topology::ByteSize(b).to_string()
            ),
            if (s, d) == (ia, ib) || (d, s) == (ia, ib) {
                String::new()
            } else {
                " (the same GPU indices were not measured there: its first pair)".into()
            }
        ),
    })
}

fn measured(bench: &BenchReport, (ia, ib): (usize, usize)) -> Option<Measured> {
    let bytes = bench.method.headline_bytes;
    let ab = figure(bench, Mode::Ce, Direction::Uni, (ia, ib), Some(bytes));
    let ba = figure(bench, Mode::Ce, Direction::Uni, (ib, ia), Some(bytes));
    let bi = figure(
        bench,
        Mode::Ce,
        Direction::Bi,
        (ia.min(ib), ia.max(ib)),
        Some(bytes),
    );
    let lat: Vec<(f64, bool)> = [(ia, ib), (ib, ia)]
        .into_iter()
        .filter_map(|p| figure(bench, Mode::Pingpong, Direction::Uni, p, None))
        .collect();
    if ab.is_none() && ba.is_none() && bi.is_none() && lat.is_empty() {
        return None;
    }
    let all = [ab, ba, bi]
        .into_iter()
        .flatten()
        .chain(lat.iter().copied());
    let peer_access = bench
        .pairs
        .iter()
        .find(|p| p.src.0 == ia && p.dst.0 == ib)
        .map(|p| p.peer_access);
    Some(Measured {
        bytes,
        peer_access,
        ce_a_to_b_gbps: ab.map(|f| f.0),
        ce_b_to_a_gbps: ba.map(|f| f.0),
        ce_bi_gbps: bi.map(|f| f.0),
        latency_us: lat.iter().map(|f| f.0).reduce(f64::max),
        verified: all.clone().all(|f| f.1),
    })
}

/// What the guest itself sees that costs bandwidth on a PCIe pair.
fn guest_causes(inputs: &Inputs, d: &PeerDecision, out: &mut Vec<String>) {
    for b in [d.a, d.b] {
        let Some(p) = inputs
            .probe
            .gpus
            .iter()
            .find(|g| g.bdf == b)
            .and_then(|g| g.pcie.as_ref())
        else {
            continue;
        };
        if !p.relaxed_ordering {
            out.push(format!("{b}: relaxed ordering off as the VM sees it (Device Control bit 4): strictly ordered writes"));
        }
        if let Some(l) = p.link.as_ref().filter(|l| l.width < l.max_width) {
            out.push(format!(
                "{b}: link trained x{} of x{}: bandwidth falls with the lanes",
                l.width, l.max_width
            ));
        }
        if p.ats != AtsView::On {
            out.push(format!("{b}: ATS not on as the VM sees it: peer requests are translated at the root complex"));
        }
    }
}

fn driver_word(d: &PeerDecision) -> Option<String> {
    d.cuda.map(|[ab, ba]| {
        match (ab.can_access, ba.can_access) {
            (true, true) => "allowed",
            (false, false) => "refused",
            _ => "one way only",
        }
        .to_string()
    })
}

fn decision_word(v: decide::Verdict) -> &'static str {
    match v {
        decide::Verdict::Enable => "enable",
        decide::Verdict::Disable => "disable",
        decide::Verdict::Unknown => "unknown",
    }
}

/// One pair: every fact, the expected figure, the verdict.
pub fn judge(inputs: &Inputs, d: &PeerDecision) -> DoctorPair {
    let (a, b) = (d.a, d.b);
    let probe = &inputs.probe;
    let link = link_of(inputs, d);
    let route = crate::bench::route_with_host(probe, inputs.host_routes.as_ref(), a, b);
    let driver = driver_word(d);
    let checks: Vec<_> = probe
        .verify
        .iter()
        .filter(|c| (c.src == a && c.dst == b) || (c.src == b && c.dst == a))
        .collect();
    let data_verified = (!checks.is_empty()).then(|| checks.iter().all(|c| c.ok()));
    let nccl = inputs.explain.as_ref().and_then(|e| {
        let p = e
            .pairs
            .iter()
            .find(|p| (p.nccl.a == a && p.nccl.b == b) || (p.nccl.a == b && p.nccl.b == a))?;
        let tag = format!("{}-{}", p.nccl.a, p.nccl.b);
        let mismatch = e.mismatches.iter().find(|m| m.contains(&tag)).cloned();
        // A file NCCL's loader refuses is the cause, whatever the driver says.
        let mismatch = match e.loader_refusals.first() {
            Some(r) if p.nccl.transport == p2p_nccl::Transport::Error => Some(format!(
                "NCCL refuses the topology file {} at initialisation: {r}",
                e.file.path.as_deref().unwrap_or("")
            )),
            _ => mismatch,
        };
        Some((p.nccl.transport, mismatch))
    });
    let index = inputs
        .bench
        .as_ref()
        .and_then(|bn| bench_index(bn, a).zip(bench_index(bn, b)));
    let measured = inputs
        .bench
        .as_ref()
        .zip(index)
        .and_then(|(bn, ix)| measured(bn, ix));
    let bytes = inputs
        .bench
        .as_ref()
        .map_or(256 << 20, |bn| bn.method.headline_bytes);
    let expected = match (&inputs.baseline, link) {
        (Some((file, base)), _) => from_baseline(file, base, index.unwrap_or((0, 1)), bytes),
        (None, Some(l)) => {
            let e = bare_metal::expected(l);
            Some(ExpectedFigure {
                from: "table".into(),
                uni_gbps: e.uni_gbps,
                bi_gbps: e.bi_gbps,
                latency_us: None,
                raw_gbps: Some(e.raw_gbps),
                source: e.source,
                date: e.date,
                note: e.note,
            })
        }
        (None, None) => None,
    };
    let uni = measured.as_ref().and_then(Measured::ce_uni_gbps);
    let ratio = uni.zip(expected.as_ref()).map(|(m, e)| m / e.uni_gbps);
    let bi_ratio = measured
        .as_ref()
        .and_then(|m| m.ce_bi_gbps)
        .zip(expected.as_ref().and_then(|e| e.bi_gbps))
        .map(|(m, e)| m / e);
    let of_raw = uni.zip(link).map(|(m, l)| m / l.raw_gbps());

    let mut broken = Vec::new();
    let mut slow = Vec::new();
    let mut fine = Vec::new();
    let why = d.reasons.join("; ");
    let allowed = driver.as_deref() == Some("allowed");
    match (d.verdict, driver.as_deref()) {
        (decide::Verdict::Enable, Some(w)) if w != "allowed" => broken.push(format!(
            "the driver's answer is `{w}` though {why}: P2P refused where it may be on"
        )),
        (decide::Verdict::Disable, Some(w)) if w != "refused" => broken.push(format!(
            "the driver allows P2P ({w}) between GPUs of different cliques ({why})"
        )),
        (decide::Verdict::Disable, _) => fine.push(format!(
            "P2P off by design ({why}): copies go through host memory"
        )),
        (decide::Verdict::Unknown, w) if w != Some("allowed") => slow.push(format!(
            "P2P off: {why}{}",
            if w.is_some() {
                "; the driver refuses it"
            } else {
                ""
            }
        )),
        (decide::Verdict::Unknown, None) => fine.push(format!(
            "not judged: {why}; whether P2P is on needs the driver's answer (CUDA) and NVLink needs NVML"
        )),
        (_, Some(_)) => fine.push(format!("P2P allowed by the driver ({why})")),
        (_, None) => fine.push(format!(
            "P2P {} per the capability ({why}); the driver's answer needs CUDA",
            decision_word(d.verdict)
        )),
    }
    match data_verified {
        Some(false) => broken.push(format!(
            "data moved between the pair did not arrive whole ({} of {} checks failed)",
            checks.iter().filter(|c| !c.ok()).count(),
            checks.len()
        )),
        Some(true) => fine.push(format!(
            "{} data checks both ways arrived whole",
            checks.len()
        )),
        None => {}
    }
    let peer_off = measured
        .as_ref()
        .is_some_and(|m| m.peer_access == Some(false));
    if measured.as_ref().is_some_and(|m| !m.verified) {
        broken.push("a bench copy between the pair did not arrive whole".into());
    }
    match &nccl {
        Some((p2p_nccl::Transport::Error, Some(m))) => {
            broken.push(format!("NCCL will refuse to start: {m}"))
        }
        Some((p2p_nccl::Transport::Error, None)) => broken.push(
            "NCCL will refuse to start: NVLink joins the pair but the driver will not peer it"
                .into(),
        ),
        Some((_, Some(m))) => broken.push(format!("NCCL and the driver disagree: {m}")),
        Some((t, None)) => fine.push(format!("NCCL uses {t}, in line with the driver's answer")),
        None => {}
    }
    let mut causes = Vec::new();
    let mut ask = Vec::new();
    // P2P off by design (different cliques) is not held to the P2P figure.
    let by_design = d.verdict == decide::Verdict::Disable && !allowed;
    let low = |r: Option<f64>| !by_design && r.is_some_and(|r| r < SLOW_RATIO);
    if let (Some(e), Some(m)) = (&expected, &measured) {
        let source = if e.from == "baseline" {
            "the baseline"
        } else {
            "bare metal"
        };
        if let (Some(u), Some(r)) = (uni, ratio) {
            let line = format!(
                "copy engine one way {u:.1} GB/s = {r:.2} of {source}'s {:.1}{}",
                e.uni_gbps,
                of_raw.map_or(String::new(), |f| format!(
                    " ({f:.2} of the link's raw rate)"
                ))
            );
            if low(ratio) {
                slow.push(line)
            } else {
                fine.push(line)
            }
        }
        if let (Some(bi), Some(r), Some(eb)) = (m.ce_bi_gbps, bi_ratio, e.bi_gbps) {
            let line = format!("both ways {bi:.1} GB/s = {r:.2} of {source}'s {eb:.1}");
            if low(bi_ratio) {
                slow.push(line)
            } else {
                fine.push(line)
            }
        }
        if let (Some(l), Some(el)) = (m.latency_us, e.latency_us) {
            let r = el / l;
            let line = format!("one-way latency {l:.2} us against the baseline's {el:.2} us");
            if !by_design && r < SLOW_RATIO_LATENCY {
                slow.push(line)
            } else {
                fine.push(line)
            }
        }
    }
    if !slow.is_empty() {
        if peer_off && allowed {
            causes.push("the bench copies ran with peer access off (`bench --peer-access off`, or the decision kept it off): through host memory".into());
        }
        let host = inputs.host_routes.as_ref().and_then(|h| h.route(a, b));
        if d.nvlinks.is_some() && !peer_off {
            causes.push(
                "NVLink below its rate: links down or degraded, or the GPUs' clocks held low"
                    .into(),
            );
            ask.push("check the pair's NVLinks on the host (`nvidia-smi nvlink -s`, every link up at full rate) and the fabric manager".into());
        } else if d.verdict != decide::Verdict::Enable || !allowed {
            ask.push("give the VM's GPUs a P2P clique: `p2p-host plan` then `p2p-host apply` on the host".into());
        }
        if let Some(cost) = host.and_then(|r| {
            let ats_both = route.starts_with("pcie-ats");
            p2p_topology::pcie_cost::route_cost(r, ats_both)
        }) {
            causes.push(cost.cause);
            ask.push(cost.ask_host);
        } else if host.is_none() && d.nvlinks.is_none() && inputs.host_routes.is_none() {
            causes.push(
                "the host route (switch, root complex, sockets) is not visible from the VM".into(),
            );
            ask.push(
                "send `p2p-host plan --json` from the host and rerun doctor with --host-plan FILE"
                    .into(),
            );
        }
        if d.nvlinks.is_none() {
            guest_causes(inputs, d, &mut causes);
        }
    }
    let verdict = if !broken.is_empty() {
        Verdict::Broken
    } else if !slow.is_empty() {
        Verdict::Slow
    } else {
        Verdict::Ok
    };
    let mut reasons = broken;
    reasons.extend(slow);
    reasons.extend(fine);
    DoctorPair {
        a,
        b,
        link: link.map_or_else(
            || {
                d.nvlinks
                    .map_or_else(|| "PCIe".into(), |n| format!("NV{n}"))
            },
            |l| l.name(),
        ),
        route,
        decision: format!("{}: {why}", decision_word(d.verdict)),
        driver,
        data_verified,
        nccl_transport: nccl.as_ref().map(|(t, _)| t.to_string()),
        nccl_disagreement: nccl.and_then(|(_, m)| m),
        measured,
        expected,
        ratio,
        bi_ratio,
        of_raw,
        verdict,
        reasons,
        likely_causes: causes,
        ask_host: ask,
    }
}

/// The one next step for a BROKEN pair.
pub fn broken_step(p: &DoctorPair) -> String {
    if p.data_verified == Some(false) || p.measured.as_ref().is_some_and(|m| !m.verified) {
        return format!(
            "keep P2P off for {}-{} (NCCL_P2P_DISABLE=1) and send `p2p-guest probe --verify --json` to the host operator",
            p.a, p.b
        );
    }
    if p.decision.starts_with("enable") && p.driver.as_deref().is_some_and(|w| w != "allowed") {
        return "run `p2p-guest probe` for its flags (hypervisor hidden, driver too old, capability not reaching the driver) and send them to the host operator".into();
    }
    if let Some(m) = &p.nccl_disagreement {
        return match m.rsplit_once(": ") {
            Some((_, fix)) => fix.to_string(),
            None => m.clone(),
        };
    }
    "run `p2p-guest probe` and `p2p-guest nccl-topo explain` for the details".into()
}
