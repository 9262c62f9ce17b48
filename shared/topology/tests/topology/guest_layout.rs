//! Guest layouts on the hand-built server of `support` (nested switches,
//! three host bridges on two sockets): addresses by the numbering rule,
//! derived by hand, and the refusals.

use p2p_test_support::topologies::{bdf, server};
use p2p_topology::guest_layout::{
    flat, flat_from, mirror, mirror_from, DeviceRole, FirstSlot, FirstSlotError, LayoutError,
    PortKind, VmDevice,
};
use p2p_topology::nccl_topo::from_guest;

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
        let mut f = p2p_test_support::topologies::by_port(
            &d.host.to_string(),
            "pci0000:20",
            None,
            p2p_topology::pci::PciePortType::Endpoint,
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

fn slot(s: &str) -> FirstSlot {
    s.parse().unwrap()
}

/// q35's pcie.0 has slots 0x00 (host bridge) to 0x1f (ICH9 LPC, SATA,
/// SMBus): a layout may start at 0x01 to 0x1e, written in decimal or 0x hex.
#[test]
fn first_slot_parses_decimal_and_hex_within_q35s_free_slots() {
    assert_eq!(slot("0x18"), slot("24"));
    assert_eq!(slot("0X18").get(), 0x18);
    assert_eq!(slot("1").get(), 1);
    assert_eq!(slot("0x1e").get(), 0x1e);
    assert_eq!(FirstSlot::default().get(), 0x10);
    // 0x10..=0x1e: the 15 slots the flat layout always had.
    assert_eq!(FirstSlot::default().room(), 15);
    assert_eq!(slot("0x1e").room(), 1);
    for (bad, err) in [
        ("0", FirstSlotError::OutOfRange(0)),
        ("0x1f", FirstSlotError::OutOfRange(0x1f)),
        ("256", FirstSlotError::OutOfRange(256)),
        ("-1", FirstSlotError::NotANumber("-1".into())),
        ("0x", FirstSlotError::NotANumber("0x".into())),
        ("", FirstSlotError::NotANumber("".into())),
    ] {
        assert_eq!(bad.parse::<FirstSlot>().unwrap_err(), err, "{bad:?}");
    }
}

#[test]
fn first_slot_moves_the_flat_slots() {
    // An audio-like second function beside GPU 08:00.0 (below root port 00:02.0).
    let mut t = server();
    t.functions.push(p2p_test_support::topologies::by_port(
        "0000:08:00.1",
        "pci0000:00",
        Some("0000:00:02.0"),
        p2p_topology::pci::PciePortType::Endpoint,
    ));
    t.sort();
    let nic = VmDevice {
        host: bdf("0000:08:00.1"),
        role: DeviceRole::Nic,
        clique: None,
    };
    let devs = [gpu("0000:81:00.0", 1), gpu("0000:08:00.0", 0), nic];
    let g = flat_from(&t, &devs, slot("0x18")).unwrap();
    // By hand: host devices take slots in the order given from 0x18: 81:00.0
    // at 0x18; 08:00.0 and 08:00.1, one host device, share 0x19 as functions
    // 0 and 1, function 0 marked multifunction.
    let at: Vec<(String, bool)> = g
        .devices
        .iter()
        .map(|d| (d.guest.to_string(), d.multifunction))
        .collect();
    assert_eq!(
        at,
        [
            ("0000:00:18.0".to_string(), false),
            ("0000:00:19.0".to_string(), true),
            ("0000:00:19.1".to_string(), false),
        ]
    );
    // The default is unchanged: 0x10 and 0x11.
    let d = flat(&t, &devs).unwrap();
    assert_eq!(d.devices[0].guest.to_string(), "0000:00:10.0");
    assert_eq!(d.devices[2].guest.to_string(), "0000:00:11.1");
    // From 0x1d only 0x1d and 0x1e are free: two host devices fit, three do not.
    let two = flat_from(&t, &devs, slot("0x1d")).unwrap();
    assert_eq!(two.devices[2].guest.to_string(), "0000:00:1e.1");
    let three = [devs[0], devs[1], gpu("0000:03:00.0", 0)];
    let err = flat_from(&t, &three, slot("0x1d")).unwrap_err();
    assert_eq!(
        err,
        LayoutError::FlatFull {
            first: 0x1d,
            max: 2,
            count: 3
        }
    );
    assert!(
        err.to_string()
            .contains("at most 2 devices on pcie.0 (slots 0x1d..=0x1e), the VM has 3"),
        "{err}"
    );
}

#[test]
fn first_slot_moves_the_mirrored_expander_buses() {
    let t = server();
    // Three host root complexes: pci0000:00, pci0000:20, pci0000:80.
    let devs = [
        gpu("0000:03:00.0", 0),
        gpu("0000:21:00.0", 0),
        gpu("0000:81:00.0", 1),
    ];
    let g = mirror_from(&t, &devs, slot("0x1c")).unwrap();
    let slots: Vec<u8> = g.root_complexes.iter().map(|r| r.slot).collect();
    assert_eq!(slots, [0x1c, 0x1d, 0x1e]);
    // Only the expander buses' slots move: bus numbers and devices stay.
    let d = mirror(&t, &devs).unwrap();
    assert_eq!(
        d.root_complexes.iter().map(|r| r.slot).collect::<Vec<_>>(),
        [0x10, 0x11, 0x12]
    );
    assert_eq!(g.devices, d.devices);
    assert_eq!(g.ports, d.ports);
    assert_eq!(
        mirror_from(&t, &devs, slot("0x1d")).unwrap_err(),
        LayoutError::MirrorFull {
            first: 0x1d,
            max: 2,
            count: 3
        }
    );
}
