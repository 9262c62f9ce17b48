//! The throughput registers of a GPU as the guest sees them: relaxed
//! ordering, payload and read request sizes, the link, and ATS. A VMM may
//! pass them through, emulate them, or hide a capability (VFIO and
//! Firecracker keep a hidden extended capability's place in the list with
//! its ID zeroed), so the guest's view can differ from the host's `check`.

pub use p2p_report::probe::{AtsView, GuestLink, GuestPcie};
use p2p_topology::pci::ConfigSpace;

fn gts(v: f32) -> String {
    format!("{v} GT/s")
}

/// Decodes the registers from raw config bytes; None without a PCI Express
/// capability (or with fewer bytes than reach it).
pub fn pcie_view(raw: &[u8]) -> Option<GuestPcie> {
    let cs = ConfigSpace::new(raw).ok()?;
    let dc = cs.device_control().ok().flatten()?;
    let link = match (
        cs.link_status().ok().flatten(),
        cs.link_capabilities().ok().flatten(),
    ) {
        (Some(st), cap) => Some(GuestLink {
            speed: gts(st.speed_gts),
            width: st.width,
            max_speed: cap.and_then(|c| c.max_speed_gts).map(gts),
            max_width: cap.map_or(0, |c| c.max_width),
        }),
        (None, _) => None,
    };
    let (ats, hidden) = if cs.has_extended_space() {
        let ext = cs.extended_capabilities().unwrap_or_default();
        let hidden = ext
            .iter()
            .filter(|e| e.id == 0)
            .map(|e| format!("{:#x}", e.offset))
            .collect();
        let ats = match cs.ats().ok().flatten() {
            Some(a) if a.enabled => AtsView::On,
            Some(_) => AtsView::Off,
            None => AtsView::Absent,
        };
        (ats, hidden)
    } else {
        (AtsView::NotRead, Vec::new())
    };
    Some(GuestPcie {
        relaxed_ordering: dc.relaxed_ordering,
        max_payload: dc.max_payload,
        max_read_request: dc.max_read_request,
        link,
        ats,
        hidden_extended_capabilities: hidden,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H200's config as a QEMU guest saw it over vfio-user
    /// (qemu-11.1-vfio-user-gpus, GPU 23:00.0).
    const H200_IN_QEMU: &[u8] = include_bytes!(
        "../../../tests/fixtures/qemu-11.1-vfio-user-gpus/sysfs/devices/pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0/0000:23:00.0/config"
    );
    /// QEMU's NVMe stand-in (qemu-11.1-nested-switch-iommu-on, 25:00.0).
    const QEMU_NVME: &[u8] = include_bytes!(
        "../../../tests/fixtures/qemu-11.1-nested-switch-iommu-on/sysfs/devices/pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:00.0/0000:23:00.0/0000:24:00.0/0000:25:00.0/config"
    );

    #[test]
    fn the_h200_in_a_qemu_guest() {
        // PCI Express capability at 0x60. Device Control (0x68) = 0x511f:
        // bit 4 set (RO on), bits 7:5 = 0 (128 B: the guest kernel matched
        // QEMU's 128-byte ports), bits 14:12 = 5 (4096 B). Link Status (0x72)
        // speed 5 = 32 GT/s, width 16; Link Capabilities (0x6c) the same.
        // The extended header at 0x100 reads ID 0 with a next pointer: a
        // capability hidden by the VMM that served it; no ATS (0x000F).
        let p = pcie_view(H200_IN_QEMU).unwrap();
        assert_eq!(
            p,
            GuestPcie {
                relaxed_ordering: true,
                max_payload: 128,
                max_read_request: 4096,
                link: Some(GuestLink {
                    speed: "32 GT/s".into(),
                    width: 16,
                    max_speed: Some("32 GT/s".into()),
                    max_width: 16
                }),
                ats: AtsView::Absent,
                hidden_extended_capabilities: vec!["0x100".into()],
            }
        );
        assert_eq!(
            p.summary(),
            "RO on, MPS 128, MRRS 4096, 32 GT/s x16, ATS not visible"
        );
    }

    #[test]
    fn qemu_nvme_leaves_relaxed_ordering_off() {
        // PCI Express capability at 0x80; Device Control (0x88) = 0: RO off,
        // 128 B payload and read request; Link Status (0x92) 0x0011 = 2.5 GT/s
        // x1; 0x100 reads 0 (empty extended list): no ATS, nothing hidden.
        let p = pcie_view(QEMU_NVME).unwrap();
        assert!(!p.relaxed_ordering);
        assert_eq!((p.max_payload, p.max_read_request), (128, 128));
        assert_eq!(p.ats, AtsView::Absent);
        assert!(p.hidden_extended_capabilities.is_empty());
        assert_eq!(
            p.summary(),
            "RO off, MPS 128, MRRS 128, 2.5 GT/s x1, no ATS"
        );
        // A 256-byte read (not root's 4 KiB) leaves ATS unread.
        assert_eq!(pcie_view(&QEMU_NVME[..256]).unwrap().ats, AtsView::NotRead);
    }
}
