//! The text form of a bench report: matrices like the reference tools'
//! (bandwidth at the headline size, latency at the small size), one-way
//! latency, NCCL bus bandwidth, and a size sweep per pair.

use p2p_topology::{ByteSize, GpuIndex};
use std::fmt::Write;

use super::bench::{BenchReport, Direction, Measurement, Mode};
use super::table::Table;

/// A number for a table or an axis: two decimals from 1 up, three
/// significant digits below (0.00213, not 0.00), so small bandwidths and
/// latencies keep their value.
pub fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x.abs() >= 1.0 {
        return format!("{x:.2}");
    }
    let decimals = (-x.abs().log10().floor()) as usize + 2;
    format!("{x:.decimals$}")
}

/// A cell: the median, or FAIL when the data did not verify.
fn cell(m: Option<&Measurement>, value: impl Fn(&Measurement) -> f64) -> String {
    match m {
        None => "n/a".into(),
        Some(m) if !m.verification.ok() => "FAIL".into(),
        Some(m) => significant(value(m)),
    }
}

impl BenchReport {
    fn present(&self, mode: Mode) -> bool {
        self.results.iter().any(|m| m.mode == mode)
    }

    /// The size a `mode` matrix shows: `want` when the run measured it, else
    /// the largest (`largest`) or smallest size it measured, and the words
    /// that say so in the title.
    fn matrix_size(&self, mode: Mode, want: u64, largest: bool) -> (u64, String) {
        let sizes = self
            .results
            .iter()
            .filter(|m| m.mode == mode)
            .map(|m| m.bytes);
        if self
            .results
            .iter()
            .any(|m| m.mode == mode && m.bytes == want)
        {
            return (want, ByteSize(want).to_string());
        }
        let (got, which) = if largest {
            (sizes.max(), "largest")
        } else {
            (sizes.min(), "smallest")
        };
        let got = got.unwrap_or(want);
        (
            got,
            format!(
                "{} ({which} measured; {} was not)",
                ByteSize(got),
                ByteSize(want)
            ),
        )
    }

    /// A GPU-by-GPU table; the diagonal (device-local copies) shows "-"
    /// unless the run measured it (`bench --pairs self`).
    fn matrix(&self, title: &str, get: impl Fn(GpuIndex, GpuIndex) -> String) -> String {
        let n = self.gpus.len();
        let mut header = vec!["D\\D".to_string()];
        header.extend((0..n).map(|j| j.to_string()));
        let mut t = Table::new(header).indent(2);
        for i in (0..n).map(GpuIndex) {
            let mut row = vec![i.0.to_string()];
            row.extend((0..n).map(GpuIndex).map(|j| match get(i, j) {
                absent if i == j && absent == "n/a" => "-".into(),
                v => v,
            }));
            t.row(row);
        }
        format!("{title}\n{}", t.render())
    }

    /// Renders the whole report for a terminal.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let mc = &self.machine;
        let _ = writeln!(
            out,
            "vp2p bench \"{}\" on {} (kernel {}, {} x {}), driver {} (CUDA API {}), NCCL {}",
            self.label,
            mc.hostname,
            mc.kernel,
            mc.cpus,
            mc.cpu,
            mc.driver_version,
            mc.cuda_driver_api,
            mc.nccl_version.as_deref().unwrap_or("absent")
        );
        for (i, g) in self.gpus.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {} {} {} (sm_{}{}, CUDA ordinal {})",
                GpuIndex(i),
                g.bdf,
                g.name,
                g.compute_capability[0],
                g.compute_capability[1],
                g.ordinal
            );
        }
        let mut t = Table::new(["PAIR", "LINK", "CUDA", "PEER ACCESS", "WHY"]).indent(2);
        for p in &self.pairs {
            t.row([
                format!("{}->{}", p.src, p.dst),
                p.class.clone(),
                if p.cuda_can_access { "can" } else { "cannot" }.into(),
                if p.peer_access { "on" } else { "off" }.into(),
                p.why.clone(),
            ]);
        }
        out.push_str(&t.render());
        let _ = writeln!(
            out,
            "Method: {} samples (median shown), spin-held streams, verified copies, GB = 1e9 bytes; peer access: {}\n",
            self.method.samples, self.method.peer_access
        );

        for mode in Mode::ALL
            .into_iter()
            .filter(|m| m.is_copy() && self.present(*m))
        {
            let (head, head_label) = self.matrix_size(mode, self.method.headline_bytes, true);
            let (lat, lat_label) = self.matrix_size(mode, self.method.latency_bytes, false);
            let uni = |i, j| {
                cell(
                    self.find(mode, Direction::Uni, Some(i), Some(j), head),
                    |m| m.gbps.median,
                )
            };
            out.push_str(&self.matrix(
                &format!("{mode}: unidirectional bandwidth (GB/s) at {head_label}"),
                uni,
            ));
            let bi = |i: GpuIndex, j: GpuIndex| {
                let (a, b) = (i.min(j), i.max(j));
                cell(
                    self.find(mode, Direction::Bi, Some(a), Some(b), head),
                    |m| m.gbps.median,
                )
            };
            out.push_str(&self.matrix(
                &format!("{mode}: bidirectional bandwidth (GB/s, both directions) at {head_label}"),
                bi,
            ));
            let l = |i, j| {
                cell(
                    self.find(mode, Direction::Uni, Some(i), Some(j), lat),
                    |m| m.latency_us.median,
                )
            };
            out.push_str(&self.matrix(&format!("{mode}: latency per copy (us) at {lat_label}"), l));
            // A split transfer says why it ran as it did.
            for m in self
                .results
                .iter()
                .filter(|m| m.mode == mode && m.bytes == head && m.direction == Direction::Uni)
            {
                if let (Some(src), Some(dst), Some(why)) = (m.src, m.dst, m.split_choice()) {
                    let _ = writeln!(
                        out,
                        "  {mode} {}->{} at {}: {why}",
                        src.0,
                        dst.0,
                        ByteSize(head)
                    );
                }
            }
            out.push('\n');
        }
        if self.present(Mode::Pingpong) {
            let pp = |i, j| {
                cell(
                    self.find(Mode::Pingpong, Direction::Uni, Some(i), Some(j), 4),
                    |m| m.latency_us.median,
                )
            };
            out.push_str(&self.matrix(
                "pingpong: one-way latency (us), GPU-initiated flag writes",
                pp,
            ));
            out.push('\n');
        }
        if self.present(Mode::Nccl) || self.present(Mode::NcclNoP2p) {
            let mut sizes: Vec<u64> = self
                .results
                .iter()
                .filter(|m| matches!(m.mode, Mode::Nccl | Mode::NcclNoP2p))
                .map(|m| m.bytes)
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            out.push_str("NCCL all-reduce bus bandwidth (GB/s, nccl-tests busbw)\n");
            let mut t = Table::new(["SIZE", "P2P allowed", "NCCL_P2P_DISABLE=1"]).indent(2);
            for s in sizes {
                t.row([
                    ByteSize(s).to_string(),
                    cell(self.find(Mode::Nccl, Direction::Bi, None, None, s), |m| {
                        m.gbps.median
                    }),
                    cell(
                        self.find(Mode::NcclNoP2p, Direction::Bi, None, None, s),
                        |m| m.gbps.median,
                    ),
                ]);
            }
            out.push_str(&t.render());
            out.push('\n');
        }
        self.render_sweeps(&mut out);
        let total = self.results.len();
        let failed: Vec<String> = self
            .results
            .iter()
            .filter(|m| !m.verification.ok())
            .map(|m| {
                let at = |g: Option<GpuIndex>| g.map_or("all".to_string(), |g| g.to_string());
                format!(
                    "{} {:?} {}->{} {}",
                    m.mode,
                    m.direction,
                    at(m.src),
                    at(m.dst),
                    ByteSize(m.bytes)
                )
            })
            .collect();
        if failed.is_empty() {
            let _ = writeln!(
                out,
                "Verification: all {total} measurements matched the source pattern"
            );
        } else {
            let _ = writeln!(
                out,
                "Verification FAILED for {} of {total}: {}",
                failed.len(),
                failed.join("; ")
            );
        }
        for t in &self.nccl_transports {
            let _ = writeln!(
                out,
                "NCCL ({}) GPU{} -> GPU{}: via {}",
                t.mode.name(),
                t.src.0,
                t.dst.0,
                t.via.join(", ")
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "Note: {n}");
        }
        out
    }

    fn render_sweeps(&self, out: &mut String) {
        let modes: Vec<Mode> = Mode::ALL
            .into_iter()
            .filter(|m| m.is_copy() && self.present(*m))
            .collect();
        if modes.is_empty() {
            return;
        }
        for p in &self.pairs {
            let mut sizes: Vec<u64> = self
                .results
                .iter()
                .filter(|m| {
                    m.src == Some(p.src)
                        && m.dst == Some(p.dst)
                        && m.direction == Direction::Uni
                        && modes.contains(&m.mode)
                })
                .map(|m| m.bytes)
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            if sizes.is_empty() {
                continue;
            }
            let _ = writeln!(out, "Size sweep {} -> {}: GB/s (us per copy)", p.src, p.dst);
            let mut header = vec!["SIZE".to_string()];
            header.extend(modes.iter().map(|m| m.to_string()));
            let mut t = Table::new(header).indent(2);
            for s in sizes {
                let mut row = vec![ByteSize(s).to_string()];
                for m in &modes {
                    let found = self.find(*m, Direction::Uni, Some(p.src), Some(p.dst), s);
                    row.push(match found {
                        Some(x) if x.verification.ok() => {
                            format!("{:.2} ({:.2})", x.gbps.median, x.latency_us.median)
                        }
                        Some(_) => "FAIL".into(),
                        None => "n/a".into(),
                    });
                }
                t.row(row);
            }
            out.push_str(&t.render());
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod significant_tests {
    use super::significant;

    #[test]
    fn small_values_keep_three_significant_digits() {
        assert_eq!(significant(395.012), "395.01");
        assert_eq!(significant(1.0), "1.00");
        assert_eq!(significant(0.5), "0.500");
        assert_eq!(significant(0.002134), "0.00213");
        assert_eq!(significant(0.0), "0");
    }
}
