//! The `<nvlink>`, `<c2c>` and `<pcilink>` passes of the loader.

use super::*;

#[test]
fn nvlink_without_count() {
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\">\n      <gpu>\n        <nvlink target=\"0000:00:07.0\" tclass=\"0x030200\"/>\n      </gpu>\n    </pci>\n",
    );
    assert_eq!(
        brief(&one_gpu(&text)),
        [(
            5,
            "<nvlink target=\"0000:00:07.0\">",
            Some("count"),
            "NCCL WARN Attribute count of node nvlink not found",
            E,
            "src/graph/topo.cc:564"
        )]
    );
}

#[test]
fn nvlink_target_when_its_class_is_a_gpu() {
    let with = |link: &str| {
        one_gpu(&file(" numaid=\"0\"", &format!("    <pci busid=\"0000:00:06.0\">\n      <gpu>\n        {link}\n      </gpu>\n    </pci>\n")))
    };
    assert_eq!(
        brief(&with("<nvlink count=\"2\" tclass=\"0x030200\"/>")),
        [(
            5,
            "<nvlink>",
            Some("target"),
            "NCCL WARN Attribute target of node nvlink not found",
            E,
            "src/graph/topo.cc:573"
        )]
    );
    // NVSwitch and CPU targets are not read.
    assert_eq!(with("<nvlink count=\"18\" tclass=\"0x068000\"/>"), []);
    assert_eq!(with("<nvlink count=\"1\" tclass=\"0x068001\"/>"), []);
    // No tclass: auto-detection fills it from the target, or with none dies.
    assert_eq!(
        with("<nvlink count=\"18\" target=\"fffffff:ffff:ff\"/>"),
        []
    );
    assert_eq!(
        brief(&with("<nvlink count=\"18\"/>")),
        [(
            5,
            "<nvlink>",
            Some("target"),
            "(nothing: the process dies of a segmentation fault)",
            NcclOutcome::Crash,
            "src/graph/xml.cc:872"
        )]
    );
}

#[test]
fn c2c_without_bw() {
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\">\n      <gpu>\n        <c2c count=\"10\"/>\n      </gpu>\n    </pci>\n",
    );
    assert_eq!(
        brief(&one_gpu(&text)),
        [(
            5,
            "<c2c>",
            Some("bw"),
            "NCCL WARN Attribute bw of node c2c not found",
            E,
            "src/graph/topo.cc:653"
        )]
    );
}

#[test]
fn pcilink_without_target() {
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      <pcilink/>\n      <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n    </pci>\n",
    );
    assert_eq!(
        brief(&one_gpu(&text)),
        [(
            4,
            "<pcilink>",
            Some("target"),
            "NCCL WARN Attribute target of node pcilink not found",
            E,
            "src/graph/topo.cc:620"
        )]
    );
    // Below a GPU's <pci> there is no switch to link from.
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\">\n      <pcilink target=\"0000:02:00.0\"/>\n    </pci>\n",
    );
    assert_eq!(
        brief(&one_gpu(&text)),
        [(
            4,
            "<pcilink target=\"0000:02:00.0\">",
            None,
            "NCCL WARN Add PCI Link error : could not find PCI SW 60",
            E,
            "src/graph/topo.cc:615"
        )]
    );
}
