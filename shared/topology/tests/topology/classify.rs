//! Classification on hand-built topologies that mirror real server layouts:
//! a dual-socket host with PCIe switches below root ports, a nested switch,
//! ACS on and off, and NVLink bonds.

use p2p_test_support::topologies::{acs_rr, bdf, server};
use p2p_topology::classify::{classify, PathClass, PeerRoute};
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{AcsState, NvLink, Topology};

fn class(t: &Topology, a: &str, b: &str) -> PathClass {
    classify(t, bdf(a), bdf(b)).unwrap().class
}

fn path_of(t: &Topology, a: &str, b: &str) -> Vec<String> {
    let p = classify(t, bdf(a), bdf(b)).unwrap();
    p.bridges.iter().map(|b| b.bdf.to_string()).collect()
}

#[test]
fn classes_follow_nvidia_smi() {
    let t = server();
    assert_eq!(class(&t, "0000:03:00.0", "0000:03:00.0"), PathClass::X);
    assert_eq!(
        class(&t, "0000:03:00.0", "0000:04:00.0"),
        PathClass::Pix,
        "one switch"
    );
    assert_eq!(
        class(&t, "0000:03:00.0", "0000:07:00.0"),
        PathClass::Pxb,
        "nested switches"
    );
    assert_eq!(
        class(&t, "0000:03:00.0", "0000:08:00.0"),
        PathClass::Phb,
        "two root ports"
    );
    assert_eq!(
        class(&t, "0000:03:00.0", "0000:21:00.0"),
        PathClass::Node,
        "two host bridges"
    );
    assert_eq!(
        class(&t, "0000:03:00.0", "0000:81:00.0"),
        PathClass::Sys,
        "two sockets"
    );
    // Symmetric.
    assert_eq!(class(&t, "0000:81:00.0", "0000:03:00.0"), PathClass::Sys);
    assert_eq!(class(&t, "0000:07:00.0", "0000:03:00.0"), PathClass::Pxb);
}

#[test]
fn acs_redirect_sends_switch_traffic_to_the_root_complex() {
    let mut t = server();
    let p = classify(&t, bdf("0000:03:00.0"), bdf("0000:04:00.0")).unwrap();
    assert_eq!(
        p.route,
        PeerRoute::Switch {
            at: bdf("0000:01:00.0")
        }
    );
    assert_eq!(p.via_iommu, Some(false));
    assert_eq!(
        path_of(&t, "0000:03:00.0", "0000:04:00.0"),
        ["0000:02:00.0", "0000:01:00.0", "0000:02:01.0"]
    );

    for f in &mut t.functions {
        if f.pcie_port_type == Some(PciePortType::SwitchDownstream) {
            f.acs = acs_rr(true);
        }
        f.iommu_group = Some(p2p_topology::IommuGroup(u32::from(f.bdf.bus)));
    }
    let p = classify(&t, bdf("0000:03:00.0"), bdf("0000:04:00.0")).unwrap();
    assert_eq!(
        p.route,
        PeerRoute::AcsRedirect {
            at: bdf("0000:01:00.0"),
            redirected_by: vec![bdf("0000:02:00.0"), bdf("0000:02:01.0")]
        }
    );
    assert_eq!(p.via_iommu, Some(true));
    assert_eq!(
        p.class,
        PathClass::Pix,
        "ACS changes the route, not the class"
    );

    // The capability without the control bit set: no redirect.
    for f in &mut t.functions {
        if f.pcie_port_type == Some(PciePortType::SwitchDownstream) {
            f.acs = acs_rr(false);
        }
    }
    let p = classify(&t, bdf("0000:03:00.0"), bdf("0000:04:00.0")).unwrap();
    assert_eq!(
        p.route,
        PeerRoute::Switch {
            at: bdf("0000:01:00.0")
        }
    );
    assert_eq!(
        p.via_iommu,
        Some(false),
        "groups exist but traffic stays in the switch"
    );
}

#[test]
fn unknown_acs_is_reported_not_guessed() {
    let mut t = server();
    for f in &mut t.functions {
        if f.bdf == bdf("0000:02:01.0") {
            f.acs = AcsState::Unknown {
                why: "64 bytes".into(),
            };
        }
    }
    let p = classify(&t, bdf("0000:03:00.0"), bdf("0000:04:00.0")).unwrap();
    assert_eq!(
        p.route,
        PeerRoute::AcsUnknown {
            at: bdf("0000:01:00.0"),
            unknown: vec![bdf("0000:02:01.0")]
        }
    );
    assert_eq!(p.via_iommu, None);
}

#[test]
fn routes_across_host_bridges_and_sockets() {
    let t = server();
    let node = classify(&t, bdf("0000:03:00.0"), bdf("0000:21:00.0")).unwrap();
    assert_eq!(node.route, PeerRoute::HostBridges);
    let sys = classify(&t, bdf("0000:08:00.0"), bdf("0000:81:00.0")).unwrap();
    assert_eq!(sys.route, PeerRoute::Sockets);
    let phb = classify(&t, bdf("0000:03:00.0"), bdf("0000:08:00.0")).unwrap();
    assert_eq!(
        phb.route,
        PeerRoute::RootComplex {
            host_bridge: "pci0000:00".into()
        }
    );
    assert_eq!(
        path_of(&t, "0000:03:00.0", "0000:08:00.0"),
        [
            "0000:02:00.0",
            "0000:01:00.0",
            "0000:00:01.0",
            "0000:00:02.0"
        ]
    );
}

#[test]
fn nvlink_wins_over_pcie() {
    let mut t = server();
    t.nvlinks.push(NvLink {
        a: bdf("0000:81:00.0"),
        b: bdf("0000:03:00.0"),
        count: Some(18),
    });
    let p = classify(&t, bdf("0000:03:00.0"), bdf("0000:81:00.0")).unwrap();
    assert_eq!(p.class, PathClass::Nv(Some(18)));
    assert_eq!(p.pcie_class, PathClass::Sys);
    assert_eq!(p.class.to_string(), "NV18");
}

#[test]
fn unknown_numa_is_not_the_same_node_as_a_known_one() {
    let mut t = server();
    t.host_bridges[1].numa_node = None; // pci0000:20
    assert_eq!(class(&t, "0000:03:00.0", "0000:21:00.0"), PathClass::Sys);
}

#[test]
fn path_class_text_round_trips_and_orders() {
    for s in ["X", "PIX", "PXB", "PHB", "NODE", "SYS", "NV18", "NV4"] {
        assert_eq!(s.parse::<PathClass>().unwrap().to_string(), s);
    }
    assert!("NVx".parse::<PathClass>().is_err());
    assert!(PathClass::Pix.within(PathClass::Phb));
    assert!(PathClass::Phb.within(PathClass::Phb));
    assert!(!PathClass::Node.within(PathClass::Phb));
    assert!(!PathClass::Nv(Some(18)).within(PathClass::Sys));
}

#[test]
fn unknown_function_is_an_error() {
    let t = server();
    let e = classify(&t, bdf("0000:03:00.0"), bdf("0000:99:00.0")).unwrap_err();
    assert_eq!(e.to_string(), "0000:99:00.0 is not in the topology");
}
