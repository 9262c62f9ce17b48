//! `plan --guest-topology mirror` and `--emit nccl-topo` on the captured
//! two-socket tree (Debian 6.1 under QEMU 11.1: pxb-pcie host bridges on NUMA
//! nodes 0/0/1, x3130 switches, root ports, an e1000e below switch sw0).
//!
//! Expected guest addresses are derived by hand from boot.sh's `two-socket`
//! layout and the numbering rule (expander buses from 0x20 in 16-bus blocks,
//! secondary buses depth first); the QEMU arguments are handed to the real
//! QEMU 11.1 and the libvirt XML to `virt-xml-validate`. The RDMA NIC is the
//! captured e1000e with an `infiniband/rxe0` entry added in a copy of the tree
//! (what soft-RoCE would create; the cloud kernel has no rxe to make it).

use p2p_tests::process::SpawnOwned;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use p2p_report::PlanReport;
use p2p_tests::libvirt::validate;
use p2p_tests::qemu::require_setup;
use p2p_tests::{fixture_dir, plan_stdout, run};
use p2p_topology::guest_layout::GuestLayout;

const TWO_SOCKET: &str = "qemu-11.1-two-socket-iommu-on";
const GPUS: &str = "0000:23:00.0,0000:24:00.0,0000:26:00.0,0000:41:00.0,0000:83:00.0,0000:84:00.0";
const NIC: &str = "0000:25:00.0";

/// A copy of the two-socket tree whose e1000e has an RDMA device.
fn tree_with_rdma_nic() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixture_dir(TWO_SOCKET).join("sysfs"))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let nic = dir
        .path()
        .join("sysfs/devices/pci0000:20/0000:20:00.0/0000:21:00.0/0000:22:02.0/0000:25:00.0");
    std::fs::create_dir_all(nic.join("infiniband/rxe0")).unwrap();
    std::fs::create_dir_all(nic.join("net/eth0")).unwrap();
    dir
}

fn plan(root: &Path, extra: &[&str]) -> String {
    plan_stdout(root, &[&["--gpu-class", "0108"][..], extra].concat())
}

#[test]
fn nic_rows_are_rdma_devices_only() {
    let tree = tree_with_rdma_nic();
    let plain = fixture_dir(TWO_SOCKET);
    let topo = |root: &Path, extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "topo",
            "--json",
            "--gpu-class",
            "0108",
            "--sysfs-root",
            root.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = run("p2p-host", &args);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        serde_json::from_str(&r.stdout).unwrap()
    };
    // The captured e1000e has no RDMA device: no NIC row, unless asked for.
    assert_eq!(topo(&plain, &[])["nics"], serde_json::json!([]));
    assert_eq!(topo(&plain, &["--all-nics"])["nics"][0]["bdf"], NIC);
    // With infiniband/rxe0 it is NIC0, with boot.sh's classes to the GPUs
    // (PIX to gpu0/gpu1 under sw0, PHB to gpu2, NODE to gpu3, SYS to node 1).
    let v = topo(tree.path(), &[]);
    assert_eq!(v["nics"][0]["bdf"], NIC);
    assert_eq!(v["nics"][0]["rdma_devices"], serde_json::json!(["rxe0"]));
    let labels = v["matrix"]["labels"].as_array().unwrap();
    let nic = labels
        .iter()
        .position(|l| l == "NIC0")
        .expect("NIC0 column");
    let row: Vec<&str> = v["matrix"]["cells"][nic]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    // GPU order: 01:00.0 (gpu6), 23, 24, 26, 41, 83, 84, then NIC0.
    assert_eq!(row, ["SYS", "PIX", "PIX", "PHB", "NODE", "SYS", "SYS", "X"]);
    let text = run(
        "p2p-host",
        &[
            "topo",
            "--gpu-class",
            "0108",
            "--sysfs-root",
            tree.path().to_str().unwrap(),
        ],
    )
    .stdout;
    assert!(text.contains("NIC0: rxe0 (0000:25:00.0)"), "{text}");
}

#[test]
fn mirror_places_devices_where_the_guest_will_enumerate_them() {
    let tree = tree_with_rdma_nic();
    let vm = format!("vm0={GPUS},{NIC}");
    let report: PlanReport = serde_json::from_str(&plan(
        tree.path(),
        &["--vm", &vm, "--guest-topology", "mirror", "--json"],
    ))
    .unwrap();
    assert_eq!(report.guest_topology, GuestLayout::Mirror);
    let g = &report.guests[0];
    // pxb 0x20 = pci0000:20: rp 20:00.0 (->21), sw0 21:00.0 (->22), d0 22:00.0
    // (->23), d1 22:01.0 (->24), d2 22:02.0 (->25, the NIC); rp 20:01.0 (->26).
    // pxb 0x30 = pci0000:40: rp 30:00.0 (->31). pxb 0x40 = pci0000:80: rp
    // 40:00.0 (->41), sw1 41:00.0 (->42), d0 (->43), d1 (->44).
    let want = [
        ("0000:23:00.0", "0000:23:00.0"),
        ("0000:24:00.0", "0000:24:00.0"),
        ("0000:25:00.0", "0000:25:00.0"),
        ("0000:26:00.0", "0000:26:00.0"),
        ("0000:41:00.0", "0000:31:00.0"),
        ("0000:83:00.0", "0000:43:00.0"),
        ("0000:84:00.0", "0000:44:00.0"),
    ];
    for (host, guest) in want {
        assert_eq!(
            g.guest_bdf(host.parse().unwrap())
                .map(|b| b.to_string())
                .as_deref(),
            Some(guest),
            "{host}"
        );
    }
    let nic = g
        .devices
        .iter()
        .find(|d| d.host.to_string() == NIC)
        .unwrap();
    assert_eq!(nic.id, "ua-vp2p-nic0");
    assert_eq!(nic.clique, None);
    // NUMA: host nodes 0, 0, 1 -> guest 0, 0, 1, with the host CPU lists.
    let nodes: Vec<(Option<u32>, u8)> = g
        .root_complexes
        .iter()
        .map(|r| (r.numa_node, r.bus_nr))
        .collect();
    assert_eq!(nodes, [(Some(0), 0x20), (Some(0), 0x30), (Some(1), 0x40)]);
    assert_eq!(g.numa_nodes.len(), 2);
    assert_eq!(g.numa_nodes[1].host_cpus.as_deref(), Some("1"));
    // The text form shows the same map.
    let text = plan(tree.path(), &["--vm", &vm, "--guest-topology", "mirror"]);
    assert!(
        text.contains("ua-vp2p-nic0  nic   0000:25:00.0  0000:25:00.0  ua-vp2p-sw0d2"),
        "{text}"
    );
}

/// QEMU 11.1 starts (paused) with the emitted arguments, each vfio-pci device
/// replaced by an emulated stand-in at the same bus and address (no host
/// device to assign here), and the fw_cfg file present.
fn qemu_starts(qemu: &Path, emitted: &str, nccl: &Path) -> Result<(), String> {
    let mut args: Vec<String> = [
        "-machine",
        "q35",
        "-accel",
        "tcg",
        "-nodefaults",
        "-display",
        "none",
        "-S",
        "-m",
        "512M",
        "-smp",
        "2,sockets=2",
        "-object",
        "memory-backend-ram,id=m0,size=256M",
        "-numa",
        "node,nodeid=0,memdev=m0",
        "-object",
        "memory-backend-ram,id=m1,size=256M",
        "-numa",
        "node,nodeid=1,memdev=m1",
        "-numa",
        "cpu,node-id=0,socket-id=0",
        "-numa",
        "cpu,node-id=1,socket-id=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for line in emitted.lines().filter(|l| !l.starts_with('#')) {
        let line = line.trim_end_matches(" \\");
        let (opt, value) = line.split_once(' ').unwrap();
        let value = if let Some(rest) = value.strip_prefix("vfio-pci,") {
            let kept: Vec<&str> = rest
                .split(',')
                .filter(|p| {
                    p.starts_with("id=")
                        || p.starts_with("bus=")
                        || p.starts_with("addr=")
                        || p.starts_with("multifunction=")
                })
                .collect();
            let standin = if rest.contains("ua-vp2p-nic") {
                "e1000e,romfile="
            } else {
                "nvme,serial=x"
            };
            format!("{standin},{}", kept.join(","))
        } else {
            value.to_string()
        };
        args.push(opt.to_string());
        args.push(value);
    }
    assert!(
        args.iter().any(|a| a.contains(&nccl.display().to_string())),
        "fw_cfg names the file"
    );
    let mut child = Command::new(qemu)
        .args(&args)
        .stderr(std::process::Stdio::piped())
        .spawn_owned()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_secs(3));
    if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        return Err(format!(
            "QEMU exited ({status}): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

#[test]
fn qemu_11_1_accepts_the_mirrored_arguments() {
    let setup = require_setup();
    let qemu = setup.qemu("10");
    let tree = tree_with_rdma_nic();
    let dir = tempfile::tempdir().unwrap();
    let nccl: PathBuf = dir.path().join("vm0.nccl-topo.xml");
    std::fs::write(
        &nccl,
        plan(
            tree.path(),
            &[
                "--vm",
                &format!("vm0={GPUS},{NIC}"),
                "--guest-topology",
                "mirror",
                "--emit",
                "nccl-topo",
            ],
        ),
    )
    .unwrap();
    let emitted = plan(
        tree.path(),
        &[
            "--vm",
            &format!("vm0={GPUS},{NIC}"),
            "--guest-topology",
            "mirror",
            "--emit",
            "qemu",
            "--nccl-topo-path",
            nccl.to_str().unwrap(),
        ],
    );
    assert_eq!(emitted.matches("-device pxb-pcie").count(), 3, "{emitted}");
    assert_eq!(emitted.matches("-device x3130-upstream").count(), 2);
    assert_eq!(emitted.matches("-device xio3130-downstream").count(), 5);
    assert!(emitted.contains("-device pcie-root-port,id=ua-vp2p-rp0,bus=ua-vp2p-rc0,addr=0x0,chassis=128,slot=0,x-speed=16,x-width=32"), "{emitted}");
    qemu_starts(&qemu, &emitted, &nccl).unwrap_or_else(|e| panic!("{e}\n{emitted}"));
    // Control: QEMU does check what we pass (a downstream port has no x-speed).
    let bad = emitted.replacen("xio3130-downstream,id=ua-vp2p-sw0d0,bus=ua-vp2p-sw0,addr=0x0,chassis=129,slot=0", "xio3130-downstream,id=ua-vp2p-sw0d0,bus=ua-vp2p-sw0,addr=0x0,chassis=129,slot=0,x-speed=32", 1);
    assert_ne!(bad, emitted);
    assert!(qemu_starts(&qemu, &bad, &nccl)
        .unwrap_err()
        .contains("x-speed"));
}

#[test]
fn libvirt_validates_the_mirrored_domain() {
    let tree = tree_with_rdma_nic();
    let frag = plan(
        tree.path(),
        &[
            "--vm",
            &format!("vm0={GPUS},{NIC}"),
            "--guest-topology",
            "mirror",
            "--emit",
            "libvirt",
            "--nccl-topo-path",
            "/var/lib/vp2p/{vm}.xml",
            "--libvirt-first-index",
            "3",
        ],
    );
    let (devices, rest) = frag
        .split_once("<!-- Inside <domain>, after <devices>: -->\n")
        .unwrap();
    let devices = devices
        .split_once("<!-- Inside <devices>: -->\n")
        .unwrap()
        .1;
    let rest = rest.replace(
        "<!-- Inside <domain>: the NCCL topology for the guest (fw_cfg). -->\n",
        "",
    );
    let (over, sysinfo) = rest.split_once("</qemu:override>\n").unwrap();
    let xml = format!(
        "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n<name>vm0</name>\n\
         <memory unit='GiB'>8</memory>\n<vcpu>2</vcpu>\n{sysinfo}<os><type arch='x86_64' machine='q35'>hvm</type></os>\n\
         <cpu><numa><cell id='0' cpus='0' memory='4' unit='GiB'/><cell id='1' cpus='1' memory='4' unit='GiB'/></numa></cpu>\n\
         <devices>\n<controller type='pci' index='0' model='pcie-root'/>\n{devices}</devices>\n{over}</qemu:override>\n</domain>\n"
    );
    validate(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    assert_eq!(xml.matches("model='pcie-expander-bus'").count(), 3);
    assert!(xml.contains("<entry name='opt/vp2p/nccl-topo.xml' file='/var/lib/vp2p/vm0.xml'/>"));
    assert!(xml.contains("<qemu:property name='x-speed' type='string' value='16'/>"));
    // Hostdevs plug into the controllers by index: the NIC below sw0's third
    // downstream port (index 3 + 3 root complexes + rp0, sw0, d0, d1 = 10).
    assert!(xml.contains("<alias name='ua-vp2p-sw0d2'/>"));
    assert!(
        xml.contains("<controller type='pci' index='10' model='pcie-switch-downstream-port'>"),
        "{xml}"
    );
    let nic = xml.split("<alias name='ua-vp2p-nic0'/>").nth(1).unwrap();
    assert!(
        nic.trim_start().starts_with(
            "<address type='pci' domain='0x0000' bus='0x0a' slot='0x00' function='0x0'/>"
        ),
        "{nic}"
    );
    // Control: the schema checks the controller models.
    assert!(
        validate(&xml.replacen("model='pcie-expander-bus'", "model='pcie-bogus-bus'", 1)).is_err()
    );
}

#[test]
fn mirror_is_refused_where_it_cannot_work() {
    let root = fixture_dir(TWO_SOCKET);
    let root = root.to_str().unwrap();
    let nic_vm = format!("a=0000:23:00.0,{NIC}");
    let cases: [(&[&str], &str); 3] = [
        (
            &["--guest-topology", "mirror", "--emit", "cloud-hypervisor"],
            "Cloud Hypervisor has no PCIe expander buses",
        ),
        (
            &[
                "--vm",
                "a=0000:23:00.0",
                "--vm",
                "b=0000:24:00.0",
                "--emit",
                "nccl-topo",
            ],
            "one VM's file; the plan has 2 VMs",
        ),
        // The plain e1000e is no RDMA NIC.
        (&["--vm", &nic_vm], "without an RDMA device"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["plan", "--sysfs-root", root, "--gpu-class", "0108"];
        args.extend_from_slice(extra);
        let r = run("p2p-host", &args);
        assert_ne!(r.code, Some(0), "{extra:?} was accepted");
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.stderr);
    }
}
