//! The readable table of `p2p-host dra slices`.

use p2p_allocation::dra::{Device, DeviceAttribute, Publication, NUMA_NODE, PCI_BUS_ID};

use crate::TextReport;

/// One row per published device (its cliques per level, NUMA node, IOMMU
/// group, nearest NIC), then the slices, the left-out devices with reasons
/// and the notes.
impl TextReport for Publication {
    fn render_text(&self) -> String {
        let own = |d: &Device, id: &str| -> String {
            match d.attributes.get(&self.attribute_name(id)) {
                Some(DeviceAttribute::String(s)) => s.clone(),
                Some(DeviceAttribute::Int(i)) => i.to_string(),
                Some(DeviceAttribute::Bool(b)) => b.to_string(),
                Some(DeviceAttribute::Version(v)) => v.clone(),
                None => "-".to_string(),
            }
        };
        let header = [
            "DEVICE",
            "KIND",
            "BUS ID",
            "PIX",
            "PXB",
            "PHB",
            "NODE",
            "NUMA",
            "GROUP",
            "NEAREST NIC",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
        for d in self.devices() {
            let bus = d
                .attributes
                .get(PCI_BUS_ID)
                .and_then(DeviceAttribute::as_str)
                .unwrap_or("-")
                .to_string();
            let numa = d
                .attributes
                .get(NUMA_NODE)
                .and_then(DeviceAttribute::as_int)
                .map_or("-".to_string(), |n| n.to_string());
            let nic = match own(d, "nearestNic").as_str() {
                "-" => "-".to_string(),
                n => format!("{n} ({})", own(d, "nearestNicClass")),
            };
            rows.push(vec![
                d.name.clone(),
                own(d, "kind"),
                bus,
                own(d, "cliquePix"),
                own(d, "cliquePxb"),
                own(d, "cliquePhb"),
                own(d, "cliqueNode"),
                numa,
                own(d, "iommuGroup"),
                nic,
            ]);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
            .collect();
        let mut out = format!(
            "driver {}, node {}: {} device(s) in {} slice(s) of pool {}\n",
            self.driver,
            self.node_name,
            self.devices().count(),
            self.slices.len(),
            self.node_name
        );
        if self.devices().count() > 0 {
            for r in &rows {
                let line: Vec<String> = r
                    .iter()
                    .zip(&widths)
                    .map(|(cell, w)| format!("{cell:<w$}"))
                    .collect();
                out.push_str(line.join("  ").trim_end());
                out.push('\n');
            }
        }
        for s in &self.slices {
            out.push_str(&format!(
                "slice {}: {} device(s), generation {}, {} of {}\n",
                s.metadata.name,
                s.spec.devices.len(),
                s.spec.pool.generation,
                self.slices
                    .iter()
                    .position(|x| x.metadata.name == s.metadata.name)
                    .map_or(0, |i| i + 1),
                s.spec.pool.resource_slice_count
            ));
        }
        for l in &self.left_out {
            out.push_str(&format!("left out: {} ({}): {}\n", l.bdf, l.kind, l.reason));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}
