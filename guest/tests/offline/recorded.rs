//! Report-format tests on the reports recorded on the 2x H200 VM
//! (docs/results/h200x2-2026-11-22): the statistics behind every number, the
//! text matrices, `compare` and its SVG, and the probe report's schema. They
//! check the recordings and the code that reads them, not GPU behaviour (the
//! GPU tests in gpu.rs do that, on a GPU VM).

use std::path::PathBuf;

use p2p_guest::compare::{compare, svg};
use p2p_guest::decide::{decide, gpu_flags, PairFacts, Verdict};
use p2p_guest::probe::report::{ProbeGpu, ProbeReport};
use p2p_guest::probe::sysfs::GuestGpu;
use p2p_report::bench::{BenchReport, Direction, Mode, Stats, BENCH_SCHEMA, GB};
use p2p_topology::GpuIndex;

fn results_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/results/h200x2-2026-11-22")
}

fn load(name: &str) -> BenchReport {
    let path = results_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn report_format_every_recorded_number_follows_from_its_samples() {
    for name in ["bench-p2p.json", "bench-nop2p.json"] {
        let r = load(name);
        assert_eq!(r.schema, BENCH_SCHEMA);
        assert_eq!(r.gpus.len(), 2);
        assert!(!r.results.is_empty());
        for m in &r.results {
            assert!(m.verification.ok(), "{name}: unverified {m:?}");
            assert_eq!(
                m.sample_seconds.len() as u32,
                r.method.samples,
                "{name}: {:?}",
                m.mode
            );
            // Recompute the bandwidth of each sample from bytes moved and time.
            let legs = if m.direction == Direction::Bi && m.mode.is_pairwise() {
                2.0
            } else {
                1.0
            };
            let per_sample: Vec<f64> = match m.mode {
                Mode::Nccl | Mode::NcclNoP2p => continue, // bus bandwidth, checked below
                Mode::Pingpong => m
                    .sample_seconds
                    .iter()
                    .map(|t| 4.0 * 2.0 * f64::from(m.copies) / t / GB)
                    .collect(),
                _ => m
                    .sample_seconds
                    .iter()
                    .map(|t| m.bytes as f64 * f64::from(m.copies) * legs / t / GB)
                    .collect(),
            };
            let s = Stats::of(&per_sample).unwrap();
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1e-12);
            assert!(
                close(s.median, m.gbps.median),
                "{name} {:?} {}: {} vs {}",
                m.mode,
                m.bytes,
                s.median,
                m.gbps.median
            );
            assert!(close(s.min, m.gbps.min) && close(s.max, m.gbps.max));
            assert!(m.gbps.min <= m.gbps.median && m.gbps.median <= m.gbps.max);
        }
        for m in r.results.iter().filter(|m| m.mode == Mode::Nccl) {
            // busbw = bytes / (t / iters) * 2(n-1)/n with n = 2.
            let t = m.sample_seconds.iter().copied().fold(f64::NAN, f64::min);
            let best = m.bytes as f64 / (t / f64::from(m.copies)) / GB;
            assert!(
                (best - m.gbps.max).abs() <= 1e-6 * best,
                "nccl {}: {best} vs {}",
                m.bytes,
                m.gbps.max
            );
        }
    }
}

#[test]
fn report_format_the_full_run_covers_every_mode_pair_and_size() {
    let r = load("bench-p2p.json");
    // Every default mode; `max` is opt-in (and newer than this recording).
    for mode in Mode::ALL.into_iter().filter(|m| *m != Mode::Max) {
        assert!(r.results.iter().any(|m| m.mode == mode), "{mode} missing");
    }
    let sizes: Vec<u64> = r
        .results
        .iter()
        .filter(|m| {
            m.mode == Mode::Ce && m.direction == Direction::Uni && m.src == Some(GpuIndex(0))
        })
        .map(|m| m.bytes)
        .collect();
    assert_eq!(sizes.first(), Some(&4));
    assert_eq!(sizes.last(), Some(&(1 << 30)));
    for (s, d) in [(0, 1), (1, 0)] {
        for mode in [
            Mode::Ce,
            Mode::SmRead,
            Mode::SmWrite,
            Mode::Staged,
            Mode::Driver,
            Mode::Pingpong,
        ] {
            assert!(
                r.results.iter().any(|m| m.mode == mode
                    && m.src == Some(GpuIndex(s))
                    && m.dst == Some(GpuIndex(d))),
                "{mode} {s}->{d}"
            );
        }
    }
}

#[test]
fn report_format_text_matrices_show_the_medians_of_the_json() {
    let r = load("bench-p2p.json");
    let text = r.render_text();
    let head = r.method.headline_bytes;
    let ce = r
        .find(
            Mode::Ce,
            Direction::Uni,
            Some(GpuIndex(0)),
            Some(GpuIndex(1)),
            head,
        )
        .unwrap();
    let block = text
        .split("ce: unidirectional bandwidth (GB/s) at 256 MiB\n")
        .nth(1)
        .expect("ce matrix");
    let row0: Vec<&str> = block.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row0, ["0", "-", &format!("{:.2}", ce.gbps.median)]);
    assert!(text.contains("Verification: all"), "{text}");
    assert!(text.contains("NCCL all-reduce bus bandwidth"));
    assert!(text.contains("pingpong: one-way latency (us)"));
}

#[test]
fn matrices_fall_back_to_the_largest_size_measured_and_say_so() {
    // As `bench --sizes 512M,1G` leaves it: nothing measured at the 256 MiB
    // headline. Keep only the recorded run's 512 MiB and 1 GiB results.
    let mut r = load("bench-p2p.json");
    assert_eq!(r.method.headline_bytes, 256 << 20);
    r.results
        .retain(|m| m.bytes == 512 << 20 || m.bytes == 1 << 30);
    assert!(
        !r.results.is_empty(),
        "the recording has 512 MiB and 1 GiB results"
    );
    let text = r.render_text();
    let title =
        "ce: unidirectional bandwidth (GB/s) at 1 GiB (largest measured; 256 MiB was not)\n";
    let block = text
        .split(title)
        .nth(1)
        .unwrap_or_else(|| panic!("no '{title}' in:\n{text}"));
    let ce = r
        .find(
            Mode::Ce,
            Direction::Uni,
            Some(GpuIndex(0)),
            Some(GpuIndex(1)),
            1 << 30,
        )
        .unwrap();
    let row0: Vec<&str> = block.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row0, ["0", "-", &format!("{:.2}", ce.gbps.median)]);
    // The latency matrix takes the smallest size measured (16 B, the
    // recording's latency size, is gone).
    let smallest = r
        .results
        .iter()
        .filter(|m| m.mode == Mode::Ce)
        .map(|m| m.bytes)
        .min()
        .unwrap();
    let want = format!(
        "ce: latency per copy (us) at {} (smallest measured; 16 B was not)",
        p2p_topology::ByteSize(smallest)
    );
    assert!(text.contains(&want), "{want}\n{text}");
}

#[test]
fn report_format_compare_recomputes_and_draws() {
    let (base, other) = (load("bench-p2p.json"), load("bench-nop2p.json"));
    let c = compare(&base, &other);
    // Every measurement of the staged-only run has its counterpart in the full run.
    assert_eq!(c.rows.len(), other.results.len());
    assert_eq!(c.only_in_other, 0);
    assert_eq!(c.only_in_base, base.results.len() - other.results.len());
    for row in &c.rows {
        let b = base
            .find(row.mode, row.direction, row.src, row.dst, row.bytes)
            .unwrap();
        let o = other
            .find(row.mode, row.direction, row.src, row.dst, row.bytes)
            .unwrap();
        let ratio = o.gbps.median / b.gbps.median;
        assert!((row.bandwidth_ratio - ratio).abs() < 1e-12);
        assert!((row.bandwidth_overhead_pct - (1.0 - ratio) * 100.0).abs() < 1e-9);
    }
    // The recorded runs: ce without peer access is the driver's path, far slower at
    // large sizes; the staged modes did not depend on peer access.
    for row in c.rows.iter().filter(|r| r.bytes >= 16 << 20) {
        match row.mode {
            Mode::Ce => assert!(row.bandwidth_ratio < 0.2, "{row:?}"),
            Mode::Staged | Mode::Driver => {
                assert!((row.bandwidth_ratio - 1.0).abs() < 0.2, "{row:?}")
            }
            _ => {}
        }
    }
    let text = c.render_text();
    assert!(text.contains("ce unidirectional:") && text.contains("BW OVERHEAD"));
    let dir = tempfile_dir();
    let path = dir.join("compare.svg");
    let panels = svg::draw(&base, &other, &c, &path).unwrap();
    assert_eq!(
        panels, 12,
        "ce/sm-read/sm-write/staged/driver/nccl-pair x uni/bi"
    );
    let svg_text = std::fs::read_to_string(&path).unwrap();
    assert!(svg_text.starts_with("<svg") || svg_text.contains("<svg"));
    assert_eq!(svg_text.matches("ce unidirectional").count(), 1);
    assert!(svg_text.matches("<polyline").count() >= 20, "curves drawn");
}

#[test]
fn report_format_probe_json_parses_and_says_nvlink_enable() {
    let path = results_dir().join("probe.json");
    let p: ProbeReport = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(p.gpus.len(), 2);
    assert!(
        p.gpus.iter().all(|g| g.clique.is_none()),
        "that VM has no capability"
    );
    assert_eq!(p.pairs.len(), 1);
    // Decide again from the facts that VM recorded, not from its verdict:
    // each GPU's capability state, NVML's 18 NVLinks between the pair (18
    // active links each, all to NVSwitches) and CUDA's answers both ways.
    let guest = |g: &ProbeGpu| GuestGpu {
        bdf: g.bdf,
        vendor: u16::from_str_radix(g.vendor.trim_start_matches("0x"), 16).unwrap(),
        device: u16::from_str_radix(g.device.trim_start_matches("0x"), 16).unwrap(),
        class: 0x030200, // 3D controller, as host-topo.json lists the H200s
        config_len: g.config_len,
        capability: g.capability.clone(),
        bts: g.bts,
        pcie: g.pcie.clone(),
    };
    let (a, b) = (guest(&p.gpus[0]), guest(&p.gpus[1]));
    assert!(
        p.gpus
            .iter()
            .all(|g| g.nvlink.as_ref().is_some_and(|l| l.active == 18)),
        "NVML saw 18 links on each GPU"
    );
    let recorded = &p.pairs[0];
    let facts = PairFacts {
        a: recorded.a,
        b: recorded.b,
        nvlinks: Some(18),
        cuda: recorded.cuda,
    };
    let cuda = facts.cuda.expect("CUDA answered on that VM");
    assert!(cuda.iter().all(|c| c.can_access), "CUDA allowed both ways");
    let d = decide(&a, &b, &facts);
    // The expectation is the driver's: on that VM, with no capability on
    // either GPU, cuDeviceCanAccessPeer granted the NVLink pair both ways, so
    // "enable" (NVLink needs no capability) and no flag (CUDA agrees).
    assert_eq!(d.verdict, Verdict::Enable, "decide() on the recorded facts");
    assert_eq!(d.reasons, ["NV18: NVLink peer access needs no capability"]);
    assert!(d.flags.is_empty(), "{:?}", d.flags);
    assert!(gpu_flags(&[a, b], p.hypervisor.present_bit).is_empty());
    // And the recording says the same as the code does today.
    assert_eq!(&d, recorded);
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("vp2p-recorded-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn max_says_why_it_split_or_not_from_its_calibration() {
    // A max measurement recorded on the 2x H200 VM (2026-11-24): its parts
    // alone (ce0 396.2 GB/s the fastest at 1 GiB, every byte on ce0). That
    // run predates `split_gbps`; the split figure here is set by hand on
    // either side of ce0's, and the line must follow it.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/results/h200x2-2026-11-24/bench-max-A.json");
    let r: BenchReport = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut m = r
        .find(
            Mode::Max,
            Direction::Uni,
            Some(GpuIndex(0)),
            Some(GpuIndex(1)),
            1 << 30,
        )
        .unwrap()
        .clone();
    assert_eq!(m.split_choice(), None, "no split figure recorded, no claim");
    m.split_gbps = Some(383.7);
    assert_eq!(
        m.split_choice().as_deref(),
        Some("split 383.7 GB/s < ce0 alone 396.2: whole copy on ce0")
    );
    m.split_gbps = Some(410.0);
    assert_eq!(
        m.split_choice().as_deref(),
        Some("split 410.0 GB/s >= ce0 alone 396.2: split over 1 of 5 parts")
    );
    // The table carries the line; the JSON the figure.
    let mut report = r.clone();
    report.results = vec![m.clone()];
    report.method.headline_bytes = 1 << 30;
    assert!(
        report
            .render_text()
            .contains("  max 0->1 at 1 GiB: split 410.0 GB/s >= ce0 alone 396.2"),
        "{}",
        report.render_text()
    );
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["split_gbps"], 410.0);
}

#[test]
fn compare_groups_pairs_by_the_route_bench_recorded() {
    let (mut base, other) = (load("bench-p2p.json"), load("bench-nop2p.json"));
    // Recorded before routes were kept: every row's route is empty.
    assert!(compare(&base, &other)
        .rows
        .iter()
        .all(|r| r.route.is_empty()));
    // Give 0->1 the route `pcie` and 1->0 `nvlink`: within each mode and
    // direction the nvlink rows come first (routes sort by name), each row
    // carries its pair's route.
    for p in &mut base.pairs {
        p.route = if p.src.0 == 0 { "pcie" } else { "nvlink" }.into();
    }
    let c = compare(&base, &other);
    let ce: Vec<_> = c
        .rows
        .iter()
        .filter(|r| r.mode.to_string() == "ce" && r.src.is_some())
        .collect();
    assert!(!ce.is_empty());
    let dir = ce[0].direction;
    let ce: Vec<_> = ce.into_iter().filter(|r| r.direction == dir).collect();
    for r in &ce {
        let want = if r.src.unwrap().0 == 0 {
            "pcie"
        } else {
            "nvlink"
        };
        assert_eq!(r.route, want);
    }
    let first_pcie = ce.iter().position(|r| r.route == "pcie");
    let last_nvlink = ce.iter().rposition(|r| r.route == "nvlink");
    if let (Some(p), Some(n)) = (first_pcie, last_nvlink) {
        assert!(n < p, "nvlink rows before pcie rows");
    }
}
