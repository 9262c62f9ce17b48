//! Each rule on a file written by hand from NCCL v2.28.3-1's source (the
//! getter and the line that calls it), in a VM whose GPUs, nets and sysfs
//! are given.

use super::*;
use crate::fill::VmFunction;

fn intel() -> CpuIdentity {
    CpuIdentity {
        arch: "x86_64".into(),
        vendor: Some("GenuineIntel".into()),
        familyid: Some(6),
        modelid: Some(143),
    }
}

/// A net the plugin names with no PCI device of its own (a virtio or
/// socket interface, as `eth0` is on the passthrough VMs).
fn socket(name: &str) -> VmNic {
    VmNic {
        name: name.into(),
        function: None,
        speed_mbps: 10_000,
        gdr: false,
    }
}

/// The refusals of `text` in a VM with these GPUs, nets (none with a PCI
/// device) and sysfs bus ids.
fn in_vm(text: &str, gpus: &[&str], nets: &[&str], sysfs: &[&str]) -> Vec<LoaderRefusal> {
    let nets: Vec<VmNic> = nets.iter().map(|n| socket(n)).collect();
    in_vm_with(text, gpus, &nets, sysfs)
}

/// [`in_vm`] with the nets as the VM lists them.
fn in_vm_with(text: &str, gpus: &[&str], nets: &[VmNic], sysfs: &[&str]) -> Vec<LoaderRefusal> {
    let gpus: Vec<Bdf> = gpus.iter().map(|g| g.parse().unwrap()).collect();
    let in_sysfs = |b: &str| sysfs.contains(&b);
    let cpu = intel();
    refusals(
        text,
        &LoaderContext {
            gpus: Some(&gpus),
            nets: Some(nets),
            in_sysfs: &in_sysfs,
            cpu: &cpu,
        },
    )
}

/// In the VM of one GPU, 0000:00:06.0, no net, nothing else in sysfs.
fn one_gpu(text: &str) -> Vec<LoaderRefusal> {
    in_vm(text, &["0000:00:06.0"], &[], &["0000:00:06.0"])
}

/// Outside a VM: every GPU and net of the file in use, no sysfs.
fn outside(text: &str) -> Vec<LoaderRefusal> {
    let cpu = intel();
    refusals(
        text,
        &LoaderContext {
            gpus: None,
            nets: None,
            in_sysfs: &|_| false,
            cpu: &cpu,
        },
    )
}

/// (line, node, attribute, what NCCL prints, result, source).
type Brief<'a> = (u32, &'a str, Option<&'a str>, &'a str, NcclOutcome, &'a str);

/// Each refusal in brief.
fn brief(r: &[LoaderRefusal]) -> Vec<Brief<'_>> {
    r.iter()
        .map(|r| {
            (
                r.line,
                r.node.as_str(),
                r.attribute.as_deref(),
                r.nccl_prints.as_str(),
                r.nccl_result,
                r.source.as_str(),
            )
        })
        .collect()
}

const E: NcclOutcome = NcclOutcome::InternalError;

mod cpu_per_gpu;
mod links;

/// A `<system>` of one `<cpu>` (its attributes given) holding `body`.
fn file(cpu_attrs: &str, body: &str) -> String {
    format!("<system version=\"1\">\n  <cpu{cpu_attrs}>\n{body}  </cpu>\n</system>\n")
}

#[test]
fn cpu_without_numaid() {
    let gpu = "    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n";
    // With affinity, auto-detection passes it; the loader asks (topo.cc:501).
    let r = one_gpu(&file(
        " affinity=\"ff\" arch=\"x86_64\" vendor=\"AuthenticAMD\"",
        gpu,
    ));
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu>",
            Some("numaid"),
            "NCCL WARN Attribute numaid of node cpu not found",
            E,
            "src/graph/topo.cc:501"
        )]
    );
    // Without affinity auto-detection stops first (xml.cc:483), and only there.
    let r = one_gpu(&file("", gpu));
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu>",
            Some("numaid"),
            "NCCL WARN GetXmlFromCpu : could not find CPU numa ID.",
            E,
            "src/graph/xml.cc:483"
        )]
    );
}

#[test]
fn system_version_missing_or_not_one() {
    let r = one_gpu("<system>\n</system>\n");
    assert_eq!(
        brief(&r),
        [(
            1,
            "<system>",
            Some("version"),
            "NCCL WARN Attribute version of node system not found",
            E,
            "src/graph/xml.cc:372"
        )]
    );
    let r = one_gpu("<system version=\"2\">\n</system>\n");
    assert_eq!(
        brief(&r),
        [(
            1,
            "<system version=\"2\">",
            Some("version"),
            "NCCL WARN XML Topology has wrong version 2, 1 needed",
            NcclOutcome::InvalidUsage,
            "src/graph/xml.cc:374"
        )]
    );
    // strtol(.., 0) reads these as 1.
    for v in ["1.0", "0x1", "01", " 1"] {
        assert_eq!(one_gpu(&format!("<system version=\"{v}\"/>")), [], "{v}");
    }
}

/// A GPU's own `<pci>` needs neither class nor link nor `<gpu>` attributes:
/// NCCL sets class 0x03 (xml.cc:890) and reads the rest from sysfs and NVML.
/// A `<cpu>` it sits in gets arch, vendor and family from the CPU.
#[test]
fn a_gpu_pci_without_class_or_link_is_not_refused() {
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\"><gpu/></pci>\n",
    );
    assert_eq!(one_gpu(&text), []);
    assert_eq!(outside(&text), []);
    // A GPU of the file the VM does not have is trimmed, whatever it lacks.
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\"/>\n    <pci><gpu><nvlink/><c2c/></gpu></pci>\n",
    );
    assert_eq!(one_gpu(&text), []);
}

/// Auto-detection fills familyid and modelid only when familyid is missing.
#[test]
fn intel_familyid_without_modelid() {
    let gpu = "    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n";
    let r = one_gpu(&file(
        " numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\"",
        gpu,
    ));
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu numaid=\"0\">",
            Some("modelid"),
            "NCCL WARN Attribute modelid of node cpu not found",
            E,
            "src/graph/topo.cc:520"
        )]
    );
    assert_eq!(
        one_gpu(&file(
            " numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\"",
            gpu
        )),
        []
    );
    // AMD never reads them.
    assert_eq!(
        one_gpu(&file(
            " numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"25\"",
            gpu
        )),
        []
    );
}

/// A `<cpu>` kept only for a net the plugin names is never auto-detected:
/// it needs arch (NVIDIA/nccl#379), and its NIC's `<pci>` its link.
#[test]
fn nic_only_cpu_is_not_filled() {
    let text = "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\">\n    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n  </cpu>\n  <cpu numaid=\"1\">\n    <pci busid=\"0000:80:00.0\" class=\"0x020000\">\n      <nic>\n        <net name=\"mlx5_0\"/>\n      </nic>\n    </pci>\n  </cpu>\n</system>\n";
    let r = in_vm(
        text,
        &["0000:00:06.0"],
        &["mlx5_0"],
        &["0000:00:06.0", "0000:80:00.0"],
    );
    assert_eq!(
        brief(&r),
        [
            (
                5,
                "<cpu numaid=\"1\">",
                Some("arch"),
                "NCCL WARN Attribute arch of node cpu not found",
                E,
                "src/graph/topo.cc:512"
            ),
            (
                6,
                "<pci busid=\"0000:80:00.0\">",
                Some("link_width"),
                "NCCL WARN Attribute link_width of node pci not found",
                E,
                "src/graph/topo.cc:471"
            ),
            (
                6,
                "<pci busid=\"0000:80:00.0\">",
                Some("link_speed"),
                "NCCL WARN Attribute link_speed of node pci not found",
                E,
                "src/graph/topo.cc:472"
            ),
        ]
    );
    // A VM without mlx5_0: the branch is trimmed.
    assert_eq!(in_vm(text, &["0000:00:06.0"], &["eth0"], &[]), []);
    // Outside a VM every net counts.
    assert_eq!(outside(text).len(), 3);
}

/// A `<cpu>` holding a net in use and one of two GPUs: the other GPU's rank
/// keeps it for the net without filling it, and fusion keeps both copies.
#[test]
fn cpu_shared_by_a_net_and_one_of_two_gpus() {
    let text = "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n    <nic>\n      <net name=\"eth0\"/>\n    </nic>\n  </cpu>\n  <cpu numaid=\"1\">\n    <pci busid=\"0000:00:07.0\" class=\"0x030200\"/>\n  </cpu>\n</system>\n";
    let two = ["0000:00:06.0", "0000:00:07.0"];
    let r = in_vm(text, &two, &["eth0"], &two);
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu numaid=\"0\">",
            Some("arch"),
            "NCCL WARN Attribute arch of node cpu not found",
            E,
            "src/graph/topo.cc:512"
        )]
    );
    // With one GPU, its rank is the only one: filled.
    assert_eq!(in_vm(text, &two[..1], &["eth0"], &two), []);
}

#[test]
fn switch_above_a_gpu() {
    let body = |attrs: &str| {
        format!("    <pci{attrs}>\n      <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n    </pci>\n")
    };
    // No busid: auto-detection dies walking up to it.
    let r = one_gpu(&file(" numaid=\"0\"", &body(" class=\"0x060400\"")));
    assert_eq!(
        brief(&r),
        [(
            3,
            "<pci>",
            Some("busid"),
            "(nothing: the process dies of a segmentation fault)",
            NcclOutcome::Crash,
            "src/graph/xml.cc:579"
        )]
    );
    // No class: sysfs gives it, unless the bus id is not there.
    let switch = " busid=\"0000:ff:00.0\"";
    assert_eq!(
        in_vm(
            &file(" numaid=\"0\"", &body(switch)),
            &["0000:00:06.0"],
            &[],
            &["0000:00:06.0", "0000:ff:00.0"]
        ),
        []
    );
    assert_eq!(
        brief(&one_gpu(&file(" numaid=\"0\"", &body(switch)))),
        [(
            3,
            "<pci busid=\"0000:ff:00.0\">",
            Some("class"),
            "NCCL WARN Attribute class of node pci not found",
            E,
            "src/graph/topo.cc:418"
        )]
    );
    assert_eq!(outside(&file(" numaid=\"0\"", &body(switch))).len(), 1);
}

/// What NCCL's reader stops at though an XML reader reads it.
#[test]
fn syntax_nccl_refuses() {
    let r = one_gpu("<system version=\"1\">\n\t<cpu numaid=\"0\"/>\n</system>\n");
    assert_eq!(
        brief(&r),
        [(
            2,
            "in <system>",
            None,
            "NCCL WARN XML Parse error : expecting '<', got '\t'",
            E,
            "src/graph/xml.cc:133"
        )]
    );
    let r = one_gpu("<system version=\"1\">\n<cpu\tnumaid=\"0\"/>\n</system>\n");
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu\tnumaid",
            None,
            "NCCL WARN XML Parse : Unexpected value with name cpu\tnumaid",
            E,
            "src/graph/xml.cc:85"
        )]
    );
    let r = one_gpu("<?xml version=\"1.0\"?>\n<system version=\"1\">\n</system>\n");
    assert_eq!(
        brief(&r),
        [(
            1,
            "<?xml>",
            None,
            "NCCL WARN XML Parse : expected >, got '?'",
            E,
            "src/graph/xml.cc:175"
        )]
    );
    assert!(
        r[0].to_string()
            .contains("src/graph/xml.cc:175 at NCCL v2.28.3-1"),
        "{}",
        r[0]
    );
}

/// Past 16 attributes NCCL drops the rest: numaid as the 17th is missing.
#[test]
fn required_attribute_past_the_sixteenth() {
    let filler: String = (1..=15).map(|i| format!(" a{i}=\"{i}\"")).collect();
    let text = file(
        &format!(" affinity=\"ff\"{filler} numaid=\"0\""),
        "    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n",
    );
    let r = one_gpu(&text);
    assert_eq!(
        brief(&r),
        [(
            2,
            "<cpu>",
            Some("numaid"),
            "NCCL WARN Attribute numaid of node cpu not found",
            E,
            "src/graph/topo.cc:501"
        )]
    );
    assert!(r[0].why.contains("attribute 17"), "{}", r[0].why);
    // As the 16th it counts.
    let text = file(
        &format!(" numaid=\"0\" affinity=\"ff\"{filler}"),
        "    <pci busid=\"0000:00:06.0\" class=\"0x030200\"/>\n",
    );
    assert_eq!(one_gpu(&text), []);
}

/// A GPU's `<pci>` spelled otherwise than NCCL spells bus ids is not found:
/// NCCL places the GPU from sysfs and trims the file's copy.
#[test]
fn gpu_busid_is_matched_as_nccl_spells_it() {
    let text = file(
        " numaid=\"0\"",
        "    <pci busid=\"0000:00:06.0\"><gpu><nvlink/></gpu></pci>\n",
    );
    assert_eq!(one_gpu(&text).len(), 2);
    assert_eq!(
        one_gpu(&text.replace("0000:00:06.0", "00000000:00:06.0")),
        []
    );
}

#[test]
fn strtol_as_c_reads_numbers() {
    for (s, v) in [
        ("12", 12),
        ("0x1f", 31),
        ("010", 8),
        ("-3", -3),
        ("0x", 0),
        ("", 0),
        ("7z", 7),
    ] {
        assert_eq!(strtol(s), v, "{s}");
    }
    assert_eq!(strtol(&"9".repeat(40)), i64::MAX);
}

#[test]
fn refused_prediction_is_error_for_every_pair() {
    let r = one_gpu("<system version=\"2\"/>");
    let order: Vec<Bdf> = ["0000:00:06.0", "0000:00:07.0", "0000:00:08.0"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect();
    let p = refused_prediction(&order, &r, &NcclEnv::default(), &|_, _| DriverP2p::Allowed);
    assert_eq!(p.pairs.len(), 3);
    assert!(p
        .pairs
        .iter()
        .all(|v| v.transport == Transport::Error && v.path == PathType::Dis));
    assert!(
        p.pairs[0].reasons[1].contains("wrong version 2"),
        "{:?}",
        p.pairs[0].reasons
    );
    assert!(p.gpus.iter().all(|g| g.net.is_none()));
}

#[test]
fn file_gpus_reads_what_nccl_reads() {
    let text = file(" numaid=\"0\"", "    <pci busid=\"0000:00:06.0\"><gpu/></pci>\n    <pci busid=\"0000:00:07.0\" class=\"0x030200\"/>\n    <pci busid=\"0000:00:08.0\" class=\"0x060400\"/>\n");
    let want: Vec<Bdf> = ["0000:00:06.0", "0000:00:07.0"]
        .iter()
        .map(|b| b.parse().unwrap())
        .collect();
    assert_eq!(file_gpus(&text), want);
}
