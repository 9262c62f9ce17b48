//! NVLink from NVSwitch functions on an HGX-shaped tree built by hand: 8 H100
//! SXM GPUs (10de:2330) and 4 NVSwitch functions (class 0x0680) on one board,
//! then two boards. The heuristic connects every GPU pair with 18 links (H100
//! SXM: 18 NVLink4 links per GPU, NVIDIA's HGX H100 data) and says that it
//! guessed; with more GPUs than one board holds it says it is likely wrong.

use p2p_host::nvlink::{discover, NvLinkOptions};
use p2p_report::TopoReport;
use p2p_topology::pci::PciePortType;
use p2p_topology::topology::{AcsState, HostBridge, NvLinkSource, PciFunction, Topology};
use p2p_topology::{Bdf, GpuSelector, PathClass};

/// An endpoint of `class` on vfio-pci below the host bridge its bus falls in,
/// NUMA node 1 above bus 0x80, its ACS not read.
fn function(bdf: Bdf, class: u32, device: u16) -> PciFunction {
    let hb = format!("pci{:04x}:{:02x}", bdf.domain, bdf.bus & 0xf0);
    let mut f =
        p2p_test_support::topologies::function(bdf, &hb, None, class, Some(PciePortType::Endpoint));
    f.device = device;
    f.acs = AcsState::NotRead;
    f.numa_node = Some(u32::from(bdf.bus >= 0x80));
    f.driver = Some("vfio-pci".into());
    f
}

/// `boards` HGX boards: 8 GPUs at buses 0x18 + 0x10*i (of board b: +0x80*b... kept
/// below 0x100), 4 NVSwitches at bus 0x05 + b, function 0..3.
fn hgx(boards: u8) -> Topology {
    let mut t = Topology::default();
    for b in 0..boards {
        for i in 0..8u8 {
            let bus = 0x10 + 0x70 * b + 0x0d * i;
            t.functions
                .push(function(Bdf::new(0, bus, 0, 0).unwrap(), 0x030200, 0x2330));
        }
        for s in 0..4u8 {
            t.functions.push(function(
                Bdf::new(0, 0x05 + b, 0, s).unwrap(),
                0x068000,
                0x22a3,
            ));
        }
    }
    let mut hbs: Vec<String> = t.functions.iter().map(|f| f.host_bridge.clone()).collect();
    hbs.sort();
    hbs.dedup();
    t.host_bridges = hbs
        .iter()
        .map(|n| HostBridge {
            name: n.clone(),
            domain: 0,
            bus: u8::from_str_radix(&n[8..], 16).unwrap(),
            numa_node: None,
        })
        .collect();
    t.sort();
    t
}

#[test]
fn one_board_connects_every_pair_and_says_it_guessed() {
    let mut t = hgx(1);
    discover(&mut t, &GpuSelector::Nvidia, &NvLinkOptions::default()).unwrap();
    assert_eq!(t.nvlink_source, Some(NvLinkSource::NvSwitch));
    assert_eq!(t.nvlinks.len(), 8 * 7 / 2);
    assert!(t.nvlinks.iter().all(|l| l.count == Some(18)));
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
    assert!(
        t.notes[0].contains("4 NVSwitch function(s)")
            && t.notes[0].contains("Fabric Manager partitions")
    );
    let r = TopoReport::build(&t, &GpuSelector::Nvidia, "hgx");
    assert_eq!(r.links[0][7], PathClass::Nv(Some(18)));
    assert!(r.render_text().contains("a heuristic"), "the text says so");
    assert!(r.notes.iter().any(|n| n.contains("heuristic")));
}

#[test]
fn two_boards_are_flagged() {
    let mut t = hgx(2);
    discover(&mut t, &GpuSelector::Nvidia, &NvLinkOptions::default()).unwrap();
    assert_eq!(
        t.nvlinks.len(),
        16 * 15 / 2,
        "the heuristic still joins everything"
    );
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("16 NVIDIA GPUs is more than one baseboard")),
        "{:?}",
        t.notes
    );
}

#[test]
fn an_operator_map_wins_and_no_guess_is_noted() {
    let mut t = hgx(1);
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("nvlink.json");
    // A Fabric Manager partition of two GPUs: only they share NVLink.
    std::fs::write(
        &map,
        r#"{"links": [{"a": "0000:10:00.0", "b": "0000:1d:00.0", "count": 18}]}"#,
    )
    .unwrap();
    let opts = NvLinkOptions {
        map: Some(map),
        use_nvml: false,
    };
    discover(&mut t, &GpuSelector::Nvidia, &opts).unwrap();
    assert_eq!(t.nvlink_source, Some(NvLinkSource::OperatorMap));
    assert_eq!(t.nvlinks.len(), 1);
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}
