//! Parses the matrix `nvidia-smi topo -m` prints, so tests compare against
//! what the real tool said on the machine a fixture came from.

/// One parsed `nvidia-smi topo -m` matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopoM {
    /// Column labels of the matrix part (GPU0, GPU1, NIC0, ...).
    pub labels: Vec<String>,
    /// `cells[i][j]` in nvidia-smi's spelling ("X", "NV18", "PHB", ...).
    pub cells: Vec<Vec<String>>,
    /// The "CPU Affinity" column, per row.
    pub cpu_affinity: Vec<Option<String>>,
    /// The "NUMA Affinity" column, per row.
    pub numa_affinity: Vec<Option<String>>,
}

impl TopoM {
    /// Parses the tab-separated matrix up to the blank line before "Legend:".
    pub fn parse(text: &str) -> Option<TopoM> {
        let mut lines = text.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<String> = lines
            .next()?
            .split('\t')
            .map(|s| s.trim().to_string())
            .collect();
        // The header starts with an empty cell; matrix labels run until "CPU Affinity".
        let labels: Vec<String> = header
            .iter()
            .skip(1)
            .take_while(|h| h.as_str() != "CPU Affinity")
            .cloned()
            .collect();
        let n = labels.len();
        let mut cells = Vec::new();
        let mut cpu_affinity = Vec::new();
        let mut numa_affinity = Vec::new();
        for line in lines.take(n) {
            let parts: Vec<&str> = line.split('\t').map(str::trim).collect();
            if parts.first()? != &labels[cells.len()] {
                return None;
            }
            cells.push(parts.get(1..=n)?.iter().map(|s| s.to_string()).collect());
            let extra: Vec<&str> = parts[n + 1..]
                .iter()
                .copied()
                .filter(|s| !s.is_empty())
                .collect();
            cpu_affinity.push(extra.first().map(|s| s.to_string()));
            numa_affinity.push(extra.get(1).map(|s| s.to_string()));
        }
        (cells.len() == n).then_some(TopoM {
            labels,
            cells,
            cpu_affinity,
            numa_affinity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_real_h200x2_output() {
        let text = std::fs::read_to_string(
            crate::fixture_dir("h200x2-passthrough-guest").join("topo-m.txt"),
        )
        .unwrap();
        let m = TopoM::parse(&text).unwrap();
        assert_eq!(m.labels, ["GPU0", "GPU1"]);
        assert_eq!(m.cells, [["X", "NV18"], ["NV18", "X"]]);
        assert_eq!(
            m.cpu_affinity,
            [Some("0-31".to_string()), Some("0-31".to_string())]
        );
        assert_eq!(
            m.numa_affinity,
            [Some("0".to_string()), Some("0".to_string())]
        );
    }
}
