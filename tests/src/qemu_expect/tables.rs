//! The expectation tables: where the QEMU command lines of
//! `scripts/qemu/boot.sh` put every "GPU", and the class of every pair.

use p2p_topology::PathClass;

use super::{p, Expect, Gpu, Meet};
use Meet::{HostBridges, RootComplex, Sockets, Switch, UnknownNuma};
use PathClass::{Node, Phb, Pix, Pxb, Sys};

/// `two-socket`: pxb0 (0x20, node 0) with a switch and a root port, pxb2
/// (0x40, node 0), pxb1 (0x80, node 1) with a switch, and gpu6 on a root port
/// of pcie.0 (NUMA unknown).
pub const TWO_SOCKET: Expect = Expect {
    name: "two-socket",
    gpus: &[
        Gpu {
            id: "gpu0",
            bdf: "0000:23:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:00.0"],
        },
        Gpu {
            id: "gpu1",
            bdf: "0000:24:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:01.0"],
        },
        Gpu {
            id: "gpu2",
            bdf: "0000:26:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:01.0"],
        },
        Gpu {
            id: "gpu3",
            bdf: "0000:41:00.0",
            host_bridge: "pci0000:40",
            numa: Some(0),
            path: &["0000:40:00.0"],
        },
        Gpu {
            id: "gpu4",
            bdf: "0000:83:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0", "0000:81:00.0", "0000:82:00.0"],
        },
        Gpu {
            id: "gpu5",
            bdf: "0000:84:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0", "0000:81:00.0", "0000:82:01.0"],
        },
        Gpu {
            id: "gpu6",
            bdf: "0000:01:00.0",
            host_bridge: "pci0000:00",
            numa: None,
            path: &["0000:00:04.0"],
        },
    ],
    nics: &[("nic0", "0000:25:00.0")],
    pairs: &[
        p("gpu0", "gpu1", Pix, Switch("0000:21:00.0")),
        p("gpu0", "gpu2", Phb, RootComplex("pci0000:20")),
        p("gpu0", "gpu3", Node, HostBridges),
        p("gpu0", "gpu4", Sys, Sockets),
        p("gpu0", "gpu5", Sys, Sockets),
        p("gpu0", "gpu6", Sys, UnknownNuma),
        p("gpu0", "nic0", Pix, Switch("0000:21:00.0")),
        p("gpu1", "gpu2", Phb, RootComplex("pci0000:20")),
        p("gpu1", "gpu3", Node, HostBridges),
        p("gpu1", "gpu4", Sys, Sockets),
        p("gpu1", "gpu5", Sys, Sockets),
        p("gpu1", "gpu6", Sys, UnknownNuma),
        p("gpu1", "nic0", Pix, Switch("0000:21:00.0")),
        p("gpu2", "gpu3", Node, HostBridges),
        p("gpu2", "gpu4", Sys, Sockets),
        p("gpu2", "gpu5", Sys, Sockets),
        p("gpu2", "gpu6", Sys, UnknownNuma),
        p("gpu2", "nic0", Phb, RootComplex("pci0000:20")),
        p("gpu3", "gpu4", Sys, Sockets),
        p("gpu3", "gpu5", Sys, Sockets),
        p("gpu3", "gpu6", Sys, UnknownNuma),
        p("gpu3", "nic0", Node, HostBridges),
        p("gpu4", "gpu5", Pix, Switch("0000:81:00.0")),
        p("gpu4", "gpu6", Sys, UnknownNuma),
        p("gpu4", "nic0", Sys, Sockets),
        p("gpu5", "gpu6", Sys, UnknownNuma),
        p("gpu5", "nic0", Sys, Sockets),
        // pcie.0 has no _PXM: unknown vs node 0 is "a different node".
        p("gpu6", "nic0", Sys, UnknownNuma),
    ],
    root_ports: &[
        "0000:00:04.0",
        "0000:20:00.0",
        "0000:20:01.0",
        "0000:40:00.0",
        "0000:80:00.0",
    ],
    switch_upstream: &["0000:21:00.0", "0000:81:00.0"],
    switch_downstream: &[
        "0000:22:00.0",
        "0000:22:01.0",
        "0000:22:02.0",
        "0000:82:00.0",
        "0000:82:01.0",
    ],
    shared_groups: &[],
};

/// `nested-switch`: switch B below switch A's first downstream port.
pub const NESTED_SWITCH: Expect = Expect {
    name: "nested-switch",
    gpus: &[
        Gpu {
            id: "gpu0",
            bdf: "0000:25:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &[
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
                "0000:23:00.0",
                "0000:24:00.0",
            ],
        },
        Gpu {
            id: "gpu1",
            bdf: "0000:26:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &[
                "0000:20:00.0",
                "0000:21:00.0",
                "0000:22:00.0",
                "0000:23:00.0",
                "0000:24:01.0",
            ],
        },
        Gpu {
            id: "gpu2",
            bdf: "0000:27:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:00.0", "0000:21:00.0", "0000:22:01.0"],
        },
        Gpu {
            id: "gpu3",
            bdf: "0000:28:00.0",
            host_bridge: "pci0000:20",
            numa: Some(0),
            path: &["0000:20:01.0"],
        },
        Gpu {
            id: "gpu4",
            bdf: "0000:81:00.0",
            host_bridge: "pci0000:80",
            numa: Some(1),
            path: &["0000:80:00.0"],
        },
    ],
    nics: &[],
    pairs: &[
        p("gpu0", "gpu1", Pix, Switch("0000:23:00.0")),
        p("gpu0", "gpu2", Pxb, Switch("0000:21:00.0")),
        p("gpu0", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu0", "gpu4", Sys, Sockets),
        p("gpu1", "gpu2", Pxb, Switch("0000:21:00.0")),
        p("gpu1", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu1", "gpu4", Sys, Sockets),
        p("gpu2", "gpu3", Phb, RootComplex("pci0000:20")),
        p("gpu2", "gpu4", Sys, Sockets),
        p("gpu3", "gpu4", Sys, Sockets),
    ],
    root_ports: &["0000:20:00.0", "0000:20:01.0", "0000:80:00.0"],
    switch_upstream: &["0000:21:00.0", "0000:23:00.0"],
    switch_downstream: &[
        "0000:22:00.0",
        "0000:22:01.0",
        "0000:24:00.0",
        "0000:24:01.0",
    ],
    // swAdn0 (22:00.0) has no ACS: switch B and everything below it share a group.
    shared_groups: &[("gpu0", "gpu1")],
};

/// The cliques the policy gives every GPU of a topology at each level, by QEMU
/// id, written from the diagrams in boot.sh. tests/tests/vmm/plan_qemu.rs recomputes them
/// from the pair classes above, and the two must agree.
pub fn expected_cliques(topology: &str, level: PathClass) -> Vec<Vec<&'static str>> {
    use PathClass::*;
    match (topology, level) {
        // gpu0/gpu1 under switch sw0 (PIX), gpu2 on the other root port of pxb0
        // (PHB), gpu3 alone on pxb2 (node 0: NODE), gpu4/gpu5 under sw1 on node 1,
        // gpu6 on pcie.0 whose node is unknown (SYS to everything).
        ("two-socket", Pix | Pxb) => vec![
            vec!["gpu0", "gpu1"],
            vec!["gpu2"],
            vec!["gpu3"],
            vec!["gpu4", "gpu5"],
            vec!["gpu6"],
        ],
        ("two-socket", Phb) => vec![
            vec!["gpu0", "gpu1", "gpu2"],
            vec!["gpu3"],
            vec!["gpu4", "gpu5"],
            vec!["gpu6"],
        ],
        ("two-socket", Node) => vec![
            vec!["gpu0", "gpu1", "gpu2", "gpu3"],
            vec!["gpu4", "gpu5"],
            vec!["gpu6"],
        ],
        ("two-socket", Sys) => vec![vec!["gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6"]],
        // gpu0/gpu1 under switch B (PIX), gpu2 under switch A above it (PXB),
        // gpu3 on the other root port of pxb0 (PHB), gpu4 on node 1 (SYS).
        ("nested-switch", Pix) => vec![
            vec!["gpu0", "gpu1"],
            vec!["gpu2"],
            vec!["gpu3"],
            vec!["gpu4"],
        ],
        ("nested-switch", Pxb) => vec![vec!["gpu0", "gpu1", "gpu2"], vec!["gpu3"], vec!["gpu4"]],
        ("nested-switch", Phb | Node) => vec![vec!["gpu0", "gpu1", "gpu2", "gpu3"], vec!["gpu4"]],
        ("nested-switch", Sys) => vec![vec!["gpu0", "gpu1", "gpu2", "gpu3", "gpu4"]],
        other => panic!("no clique table for {other:?}"),
    }
}
