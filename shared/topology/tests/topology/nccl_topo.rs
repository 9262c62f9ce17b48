//! NCCL topology files: the tree rules NCCL 2.28 applies (src/graph/paths.cc:
//! GPU-switch-GPU is PIX, two switch nodes PXB, through the CPU PHB, across
//! CPUs SYS) hold for the files vp2p writes, and the text is NCCL's format.

use p2p_topology::nccl_topo::{from_cliques, render, CliqueGpu, NcclCpu, NcclPci, NcclSystem};
use p2p_topology::topology::LinkInfo;
use p2p_topology::Bdf;

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

fn gpu(b: &str, numa: Option<u32>, clique: Option<u8>) -> CliqueGpu {
    CliqueGpu {
        busid: bdf(b),
        class: 0x030200,
        vendor: 0x10de,
        device: 0x2335,
        subsystem_vendor: Some(0x10de),
        subsystem_device: Some(0x18bf),
        link: LinkInfo {
            max_speed: Some("32.0 GT/s PCIe".into()),
            max_width: Some(16),
            ..Default::default()
        },
        numa_node: numa,
        clique,
    }
}

#[test]
fn cliques_become_switches_and_nccl_classes_follow_the_driver() {
    let gpus = [
        gpu("0000:23:00.0", Some(0), Some(0)),
        gpu("0000:24:00.0", Some(0), Some(0)),
        gpu("0000:25:00.0", Some(0), Some(1)),
        gpu("0000:26:00.0", Some(0), None),
        gpu("0000:83:00.0", Some(1), Some(2)),
    ];
    let s = from_cliques(&gpus, 0xfe);
    let a = |x: &str, y: &str| s.nccl_class(bdf(x), bdf(y));
    // Same clique: one switch, PIX, inside NCCL's default P2P level (PXB).
    assert_eq!(a("0000:23:00.0", "0000:24:00.0"), Some("PIX"));
    // Different cliques, or no capability: they meet at the CPU (PHB): off.
    assert_eq!(a("0000:23:00.0", "0000:25:00.0"), Some("PHB"));
    assert_eq!(a("0000:23:00.0", "0000:26:00.0"), Some("PHB"));
    // Another NUMA node: SYS.
    assert_eq!(a("0000:23:00.0", "0000:83:00.0"), Some("SYS"));
    assert_eq!(a("0000:23:00.0", "0000:99:00.0"), None);
    // Switches at the free bus, device number = clique id.
    let switches: Vec<String> = s
        .all_pci()
        .iter()
        .filter(|p| p.is_bridge())
        .map(|p| p.busid.to_string())
        .collect();
    assert_eq!(switches, ["0000:fe:00.0", "0000:fe:01.0", "0000:fe:02.0"]);
}

#[test]
fn nested_switches_are_pxb() {
    let leaf = |b: &str| NcclPci {
        busid: bdf(b),
        class: 0x030200,
        vendor: Some(0x10de),
        device: Some(0x2335),
        subsystem_vendor: None,
        subsystem_device: None,
        link_speed: Some("32.0 GT/s PCIe".into()),
        link_width: Some(16),
        children: vec![],
    };
    let sw = |b: &str, children| NcclPci {
        busid: bdf(b),
        class: 0x060400,
        vendor: None,
        device: None,
        subsystem_vendor: None,
        subsystem_device: None,
        link_speed: None,
        link_width: None,
        children,
    };
    // boot.sh's nested-switch layout: swB below swA; gpu2 on swA.
    let s = NcclSystem {
        cpus: vec![NcclCpu {
            numaid: 0,
            affinity: None,
            arch: None,
            vendor: None,
            familyid: None,
            modelid: None,
            pci: vec![
                sw(
                    "0000:21:00.0",
                    vec![
                        sw(
                            "0000:23:00.0",
                            vec![leaf("0000:25:00.0"), leaf("0000:26:00.0")],
                        ),
                        leaf("0000:27:00.0"),
                    ],
                ),
                leaf("0000:28:00.0"),
            ],
        }],
    };
    assert_eq!(
        s.nccl_class(bdf("0000:25:00.0"), bdf("0000:26:00.0")),
        Some("PIX")
    );
    assert_eq!(
        s.nccl_class(bdf("0000:25:00.0"), bdf("0000:27:00.0")),
        Some("PXB")
    );
    assert_eq!(
        s.nccl_class(bdf("0000:27:00.0"), bdf("0000:28:00.0")),
        Some("PHB")
    );
}

#[test]
fn the_text_is_nccls_format() {
    let s = from_cliques(&[gpu("0000:00:06.0", None, Some(3))], 0xff);
    // Attribute names and spelling as in NCCL's own dump
    // (fixtures/h200x2-passthrough-guest/nccl-topo-dump.xml): version 1,
    // lower-case bus ids, 0x-prefixed ids, the kernel's link speed string.
    assert_eq!(
        render(&s),
        "<system version=\"1\">\n  <cpu numaid=\"-1\">\n    <pci busid=\"0000:ff:03.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <pci busid=\"0000:00:06.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\" subsystem_vendor=\"0x10de\" subsystem_device=\"0x18bf\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/>\n    </pci>\n  </cpu>\n</system>\n"
    );
    let dump = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/h200x2-passthrough-guest/nccl-topo-dump.xml"),
    )
    .expect("tests/fixtures/h200x2-passthrough-guest/nccl-topo-dump.xml");
    assert!(dump.contains("<pci busid=\"0000:00:06.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\" subsystem_vendor=\"0x10de\" subsystem_device=\"0x18bf\" link_speed=\"32.0 GT/s PCIe\""));
}
