//! Guest layouts on the hand-built server of `support` (nested switches,
//! three host bridges on two sockets): addresses by the numbering rule,
//! derived by hand, and the refusals.

mod support;

use p2p_shared::guest_layout::{flat, mirror, DeviceRole, LayoutError, PortKind, VmDevice};
use p2p_shared::nccl_topo::from_guest;
use support::{bdf, server};

fn gpu(b: &str, clique: u8) -> VmDevice {
    VmDevice {
        host: bdf(b),
        role: DeviceRole::Gpu,
        clique: Some(clique),
    }
}

#[test]
fn nested_switches_mirror_depth_first() {
    let t = server();
    let devs = [
        gpu("0000:03:00.0", 0),
        gpu("0000:07:00.0", 0),
        gpu("0000:08:00.0", 0),
        gpu("0000:81:00.0", 1),
    ];
    let g = mirror(&t, &devs).unwrap();
    // pci0000:00 -> pxb 0x20: rp 00:01.0 at 20:00.0 (->21), switch 21:00.0
    // (->22), its downstream ports 02:00.0 and 02:02.0 at 22:00.0 (->23: the GPU
    // 03:00.0) and 22:01.0 (->24: switch 24:00.0 ->25, port 25:00.0 ->26: GPU
    // 07:00.0); rp 00:02.0 at 20:01.0 (->27: GPU 08:00.0). pci0000:80 -> pxb
    // 0x30 (next 16-bus block; pci0000:20 holds no VM device): rp 30:00.0 (->31).
    let at = |h: &str| g.guest_bdf(bdf(h)).unwrap().to_string();
    assert_eq!(at("0000:03:00.0"), "0000:23:00.0");
    assert_eq!(at("0000:07:00.0"), "0000:26:00.0");
    assert_eq!(at("0000:08:00.0"), "0000:27:00.0");
    assert_eq!(at("0000:81:00.0"), "0000:31:00.0");
    let kinds: Vec<PortKind> = g.ports.iter().map(|p| p.kind).collect();
    use PortKind::*;
    assert_eq!(
        kinds,
        [
            RootPort,
            SwitchUpstream,
            SwitchDownstream,
            SwitchDownstream,
            SwitchUpstream,
            SwitchDownstream,
            RootPort,
            RootPort
        ]
    );
    assert_eq!(g.root_complexes.len(), 2);
    assert_eq!(g.root_complexes[1].numa_node, Some(1));
    // Chassis numbers are unique: QEMU refuses a second slot port with the
    // chassis and slot of another (pcie_chassis_add_slot), and vp2p gives each
    // slot port (root and downstream ports, which carry `chassis`; upstream
    // ports do not) its own chassis. Above: 3 root and 3 downstream ports.
    let ch: Vec<u8> = g.ports.iter().filter_map(|p| p.chassis).collect();
    let slot_ports = kinds
        .iter()
        .filter(|k| matches!(k, RootPort | SwitchDownstream))
        .count();
    assert_eq!(
        (ch.len(), slot_ports),
        (6, 6),
        "one chassis per slot port: {ch:?}"
    );
    let distinct: std::collections::BTreeSet<u8> = ch.iter().copied().collect();
    assert_eq!(distinct.len(), ch.len(), "chassis numbers repeat: {ch:?}");
    // NCCL sees two nested switches: 03 and 07 PXB, 03 and 08 PHB, 81 SYS.
    let nccl = from_guest(&t, &g);
    let c = |a: &str, b: &str| nccl.nccl_class(bdf(a), bdf(b));
    assert_eq!(c("0000:23:00.0", "0000:26:00.0"), Some("PXB"));
    assert_eq!(c("0000:23:00.0", "0000:27:00.0"), Some("PHB"));
    assert_eq!(c("0000:23:00.0", "0000:31:00.0"), Some("SYS"));
}

#[test]
fn flat_pins_slots_from_0x10_in_the_order_given() {
    let t = server();
    let g = flat(&t, &[gpu("0000:81:00.0", 1), gpu("0000:03:00.0", 0)]).unwrap();
    assert_eq!(g.devices[0].guest.to_string(), "0000:00:10.0");
    assert_eq!(g.devices[1].guest.to_string(), "0000:00:11.0");
    assert!(g.ports.is_empty() && g.root_complexes.is_empty());
    // The flat file invents the switches: 03:00.0 sits below two host switches.
    let nccl = from_guest(&t, &g);
    let bridges: Vec<String> = nccl
        .all_pci()
        .iter()
        .filter(|p| p.is_bridge())
        .map(|p| p.busid.to_string())
        .collect();
    assert_eq!(
        bridges,
        ["0000:ff:00.0"],
        "one switch above 03:00.0 (01:00.0)"
    );
}

#[test]
fn refusals_name_the_device() {
    let t = server();
    assert_eq!(
        mirror(&t, &[gpu("0000:99:00.0", 0)]).unwrap_err(),
        LayoutError::UnknownDevice(bdf("0000:99:00.0"))
    );
    assert_eq!(
        flat(&t, &[gpu("0000:03:00.0", 0), gpu("0000:03:00.0", 0)]).unwrap_err(),
        LayoutError::Duplicate(bdf("0000:03:00.0"))
    );
    let many: Vec<VmDevice> = (0..16)
        .map(|i| gpu(&format!("0000:{:02x}:00.0", 0x40 + i), 0))
        .collect();
    let mut t2 = server();
    for d in &many {
        let mut f = support::func(
            &d.host.to_string(),
            "pci0000:20",
            None,
            p2p_shared::pci::PciePortType::Endpoint,
        );
        f.is_bridge = false;
        t2.functions.push(f);
    }
    t2.sort();
    let err = flat(&t2, &many).unwrap_err();
    assert!(
        err.to_string().contains("at most 15 devices on pcie.0"),
        "{err}"
    );
}
