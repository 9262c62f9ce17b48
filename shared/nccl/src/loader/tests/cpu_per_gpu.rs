//! A file that puts each GPU of a passthrough VM below a `<cpu>` of its own
//! (and below a bridge the VM does not have), the `<cpu>`s naming arch and
//! vendor but not family and model: what NCCL 2.28.3 makes of it in a VM
//! whose one net is a virtio interface. Expected from NCCL v2.28.3-1's
//! source, worked by hand: each rank fills the `<cpu>` its own GPU's walk
//! reaches (xml.cc:728-731), the plugin's `eth0`, absent from the file and
//! not a PCI device, is hung below the file's first `<cpu>` unfilled
//! (xml.cc:944-945), every rank keeps that `<cpu>` for it, and the copies of
//! the ranks whose GPU sits elsewhere reach the loader unfilled beside the
//! filled one (xml.cc:291-303), where Intel needs familyid (topo.cc:519).
//! Checked against NCCL itself on a 4x H200 VM
//! (docs/results/h200x4-2026-11-28-nccl-cpu-fill).

use super::*;

const GPUS: [&str; 4] = [
    "0000:00:06.0",
    "0000:00:07.0",
    "0000:00:08.0",
    "0000:00:09.0",
];

/// One `<cpu>` per GPU (numaid 0..3) with `cpu_attrs`, each GPU below a
/// bridge `0000:ff:0N.0` when `bridges`; or, with `one_cpu`, every GPU in
/// the first.
fn per_gpu(cpu_attrs: &str, bridges: bool, one_cpu: bool) -> String {
    let mut out = String::from("<system version=\"1\">\n");
    for (n, g) in GPUS.iter().enumerate() {
        if !one_cpu || n == 0 {
            out.push_str(&format!("  <cpu numaid=\"{n}\"{cpu_attrs}>\n"));
        }
        let gpu = format!("<pci busid=\"{g}\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"/>");
        if bridges {
            out.push_str(&format!("    <pci busid=\"0000:ff:0{n}.0\" class=\"0x060400\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n      {gpu}\n    </pci>\n"));
        } else {
            out.push_str(&format!("    {gpu}\n"));
        }
        if !one_cpu || n == GPUS.len() - 1 {
            out.push_str("  </cpu>\n");
        }
    }
    out.push_str("</system>\n");
    out
}

const INTEL: &str = " arch=\"x86_64\" vendor=\"GenuineIntel\"";

fn four(text: &str, nets: &[&str]) -> Vec<LoaderRefusal> {
    in_vm(text, &GPUS, nets, &GPUS)
}

#[test]
fn the_first_cpu_reaches_the_loader_unfilled_beside_a_virtio_net() {
    for bridges in [true, false] {
        let text = per_gpu(INTEL, bridges, false);
        let r = four(&text, &["eth0"]);
        let named: Vec<_> = r.iter().map(|r| (r.line, r.node.as_str())).collect();
        assert_eq!(named, [(2, "<cpu numaid=\"0\">"); 2], "{text}");
        assert_eq!(
            r[0].nccl_prints,
            "NCCL WARN Attribute familyid of node cpu not found"
        );
        assert_eq!(r[0].source, "src/graph/topo.cc:519");
        assert_eq!(r[1].attribute.as_deref(), Some("modelid"));
        assert!(r[0].why.contains("eth0"), "{}", r[0].why);
    }
}

#[test]
fn without_that_net_or_with_one_cpu_or_with_the_family_nccl_accepts_it() {
    // No net the file does not name: each <cpu> is kept and filled by its
    // own rank alone.
    assert_eq!(four(&per_gpu(INTEL, true, false), &[]), []);
    // One <cpu> for every GPU: every rank walks it, so every copy is filled.
    assert_eq!(four(&per_gpu(INTEL, true, true), &["eth0"]), []);
    // Family and model given: nothing left to fill.
    let given = format!("{INTEL} familyid=\"6\" modelid=\"207\"");
    assert_eq!(four(&per_gpu(&given, true, false), &["eth0"]), []);
    // AMD is never asked for them.
    let amd = " arch=\"x86_64\" vendor=\"AuthenticAMD\"";
    assert_eq!(four(&per_gpu(amd, true, false), &["eth0"]), []);
}

#[test]
fn one_rank_fills_the_first_cpu_only_when_its_gpu_sits_there() {
    let text = per_gpu(INTEL, true, false);
    assert_eq!(in_vm(&text, &GPUS[..1], &["eth0"], &GPUS), []);
    let r = in_vm(&text, &GPUS[1..2], &["eth0"], &GPUS);
    assert_eq!(r[0].node, "<cpu numaid=\"0\">");
    assert_eq!(r[0].attribute.as_deref(), Some("familyid"));
}

/// A PCI NIC the file does not name climbs its own sysfs chain into the
/// file: to the first bridge the file names (xml.cc:683), or to the `<cpu>`
/// of its NUMA node (xml.cc:672-673); every rank walks and fills what it
/// reaches, so it leaves nothing unfilled.
#[test]
fn a_pci_nic_the_file_does_not_name_fills_what_it_reaches() {
    let text = per_gpu(INTEL, true, false);
    let nic = |numa: i32, bridges: Vec<Bdf>| VmNic {
        name: "mlx5_0".into(),
        function: Some(VmFunction {
            busid: "0000:30:00.0".parse().unwrap(),
            class: 0x020700,
            numa,
            bridges,
            link_speed: None,
            link_width: None,
        }),
        speed_mbps: 400_000,
        gdr: true,
    };
    let below_bridge = nic(-1, vec!["0000:ff:02.0".parse().unwrap()]);
    assert_eq!(in_vm_with(&text, &GPUS, &[below_bridge], &GPUS), []);
    let on_node_3 = nic(3, Vec::new());
    assert_eq!(in_vm_with(&text, &GPUS, &[on_node_3], &GPUS), []);
    // On node 0 it fills the first <cpu> in every rank, so a virtio net
    // hung there too leaves no copy unfilled.
    let both = [socket("eth0"), nic(0, Vec::new())];
    assert_eq!(in_vm_with(&text, &GPUS, &both, &GPUS), []);
    assert_eq!(in_vm_with(&text, &GPUS, &both[..1], &GPUS).len(), 2);
}
