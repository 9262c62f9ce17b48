//! Contract tests: what `p2p-host plan --emit` writes is fed to the real
//! consumers (QEMU's option parser, libvirt's own schema), and to vp2p's own
//! contract of the Cloud Hypervisor requests (tests/contracts/, each fact
//! cited to Cloud Hypervisor v53.0); `p2p-host apply` talks to a server that
//! answers as that contract says. QEMU and libvirt's validator must be installed (scripts/setup.sh);
//! a missing tool fails the test with a message saying so.

use std::path::Path;
use std::process::Command;

use p2p_tests::ch_contract::{answer_statuses, BodyCheck};
use p2p_tests::ch_server::FakeCloudHypervisor;
use p2p_tests::libvirt::{tool, validate};
use p2p_tests::{plan_stdout, run, unpack_fixture};
use serde_json::{json, Value};

const FIXTURE: &str = "h200x4-passthrough-guest";

/// `plan` on the 4-GPU fixture at PIX: four GPUs on a flat bus, one clique each.
fn plan(extra: &[&str]) -> String {
    let tree = unpack_fixture(FIXTURE);
    plan_stdout(tree.path(), &[&["--max-level", "pix"][..], extra].concat())
}

fn qemu_accepts(device_arg: &str) -> Result<(), String> {
    let out = Command::new(tool("qemu-system-x86_64"))
        .args([
            "-machine",
            "q35,accel=tcg",
            "-nodefaults",
            "-display",
            "none",
            "-S",
            "-device",
            device_arg,
        ])
        .output()
        .expect("qemu runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    // Every argument names a host GPU that does not exist here: that must be
    // the only complaint, which proves the property name and value parsed.
    if err.contains("no such host device") && !err.contains("Property") {
        Ok(())
    } else {
        Err(err)
    }
}

#[test]
fn qemu_parses_every_emitted_device() {
    let text = plan(&["--emit", "qemu"]);
    let devices: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("-device "))
        .map(|l| l.trim_end_matches(" \\").to_string())
        .collect();
    assert_eq!(devices.len(), 4, "{text}");
    for (i, d) in devices.iter().enumerate() {
        assert!(d.ends_with(&format!("x-nv-gpudirect-clique={i}")), "{d}");
        qemu_accepts(d).unwrap_or_else(|e| panic!("QEMU refused {d}: {e}"));
    }
    // Controls: QEMU does check the property, so the test above can fail.
    let bad = devices[0].replace("clique=0", "clique=16");
    assert!(qemu_accepts(&bad).unwrap_err().contains("valid range 0-15"));
    let typo = devices[0].replace("gpudirect-clique", "gpudirect-cliqu");
    assert!(qemu_accepts(&typo).unwrap_err().contains("not found"));
}

/// The capability's bytes as QEMU lays them out (QEMU 11.1, the version
/// scripts/setup.sh installs: hw/vfio/pci-quirks.c, the layout comment above
/// `get_nv_gpudirect_clique_id` and the writes of `vfio_add_nv_gpudirect_cap`).
/// In our words: byte 0 is the vendor-specific capability id 0x09 and byte 1
/// the next pointer (0, the capability is added last); byte 2 the length, 8;
/// bytes 3, 4 and 5 the signature 'P', '2', 'P'; byte 6 carries the clique id
/// in bits 6:3 over a version of 0 in bits 2:0; byte 7 and bit 7 of byte 6
/// are reserved, 0. Read as two little-endian dwords: DW0 = 'P' << 24 |
/// 8 << 16 | 0 << 8 | 9 = 0x5008_0009, and DW1 = clique << 3 in its upper
/// half over 'P' << 8 | '2' = 0x5032 in its lower half.
#[test]
fn capability_bytes_are_the_ones_qemu_writes() {
    use p2p_topology::{Clique, P2pCapability};
    for clique in 0u8..16 {
        let qemu = [0x09, 0x00, 0x08, 0x50, 0x32, 0x50, clique << 3, 0x00];
        let ours = P2pCapability::new(Clique::new(clique).unwrap(), 0).encode();
        assert_eq!(ours, qemu, "clique {clique}: vp2p's bytes vs QEMU's");
        let dw1 = ((u32::from(clique) << 3) << 16) | 0x5032;
        assert_eq!(
            [
                u32::from_le_bytes(ours[..4].try_into().unwrap()),
                u32::from_le_bytes(ours[4..].try_into().unwrap())
            ],
            [0x5008_0009, dw1],
            "clique {clique}: as the two dwords of QEMU's diagram"
        );
    }
}

/// Puts the emitted fragments where their comments say, in a minimal domain.
fn domain_from_fragments(fragments: &str) -> String {
    let (devices, rest) = fragments
        .split_once("<!-- Inside <domain>, after <devices>: -->\n")
        .expect("the fragments say where the override goes");
    let devices = devices
        .split_once("<!-- Inside <devices>: -->\n")
        .unwrap()
        .1;
    format!(
        "<domain type='kvm' xmlns:qemu='{}'>\n<name>vp2p</name>\n<memory unit='GiB'>8</memory>\n\
         <os><type arch='x86_64' machine='q35'>hvm</type></os>\n<devices>\n{devices}</devices>\n{rest}</domain>\n",
        p2p_host::vmm::libvirt::QEMU_NAMESPACE
    )
}

#[test]
fn libvirt_schema_accepts_the_fragments() {
    let text = plan(&["--emit", "libvirt"]);
    assert_eq!(text.matches("<hostdev ").count(), 4);
    assert_eq!(text.matches("name='x-nv-gpudirect-clique'").count(), 4);
    let xml = domain_from_fragments(&text);
    validate(&xml).unwrap_or_else(|e| panic!("libvirt rejects:\n{xml}\n{e}"));
    // Control: the schema does look at the override block.
    let broken = xml.replacen("type='unsigned'", "type='bogus'", 1);
    assert!(validate(&broken).is_err());
    // The library's complete example domain validates too.
    let tree = unpack_fixture(FIXTURE);
    let topo =
        p2p_host::sysfs::scan(&p2p_host::sysfs::SysfsRoot::new(tree.path()).unwrap()).unwrap();
    let gpus: Vec<_> = topo
        .functions
        .iter()
        .filter(|f| f.vendor == 0x10de)
        .map(|f| f.bdf)
        .collect();
    let plan =
        p2p_allocation::clique::plan_cliques(&topo, "vm0", &gpus, Default::default()).unwrap();
    let devices: Vec<_> = plan
        .assignments
        .iter()
        .map(|a| p2p_topology::guest_layout::VmDevice {
            host: a.bdf,
            role: p2p_topology::guest_layout::DeviceRole::Gpu,
            clique: Some(a.clique.id()),
        })
        .collect();
    let guest = p2p_topology::guest_layout::flat(&topo, &devices).unwrap();
    let opts = p2p_host::vmm::EmitOptions::default();
    validate(&p2p_host::vmm::libvirt::example_domain(
        &plan, &guest, &opts,
    ))
    .unwrap();
}

const ADD: &str = "/api/v1/vm.add-device";
const REMOVE: &str = "/api/v1/vm.remove-device";

/// The emitted request bodies hold to vp2p's own contract
/// (tests/contracts/cloud-hypervisor-requests.json, facts cited there to Cloud
/// Hypervisor v53.0), and a body with one wrong name, type or value does not.
#[test]
fn cloud_hypervisor_bodies_match_the_contract() {
    let device = BodyCheck::request(ADD);
    let tree = unpack_fixture(FIXTURE);
    let topo =
        p2p_host::sysfs::scan(&p2p_host::sysfs::SysfsRoot::new(tree.path()).unwrap()).unwrap();
    let gpus: Vec<_> = topo
        .functions
        .iter()
        .filter(|f| f.vendor == 0x10de)
        .map(|f| f.bdf)
        .collect();
    let level = p2p_allocation::clique::MaxLevel::new(p2p_topology::PathClass::Pix).unwrap();
    let plan = p2p_allocation::clique::plan_cliques(&topo, "vm0", &gpus, level).unwrap();
    let bodies = p2p_host::vmm::cloud_hypervisor::device_configs(&plan);
    assert_eq!(bodies.len(), 4);
    for b in &bodies {
        let v = serde_json::to_value(b).unwrap();
        device
            .check(&v)
            .unwrap_or_else(|e| panic!("{v} violates the add-device contract: {e}"));
    }

    // Controls: an emitted body with one thing wrong fails the check.
    let emitted = serde_json::to_value(&bodies[1]).unwrap();
    let wrong = |edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut v = emitted.clone();
        edit(v.as_object_mut().unwrap());
        device.check(&v)
    };
    let renamed = wrong(&|m| {
        let c = m.remove("x_nv_gpudirect_clique").unwrap();
        m.insert("x_nv_gpu_direct_clique".into(), c);
    });
    assert!(
        renamed
            .as_ref()
            .unwrap_err()
            .contains("x_nv_gpu_direct_clique"),
        "{renamed:?}"
    );
    let as_text = wrong(&|m| {
        m.insert("x_nv_gpudirect_clique".into(), json!("1"));
    });
    assert!(
        as_text
            .as_ref()
            .unwrap_err()
            .contains("is not of type \"integer\""),
        "{as_text:?}"
    );
    for out_of_range in [16, -1, 200] {
        assert!(
            wrong(&|m| {
                m.insert("x_nv_gpudirect_clique".into(), json!(out_of_range));
            })
            .is_err(),
            "clique {out_of_range}: the capability's field holds 0..=15, the server a u8"
        );
    }
    assert!(wrong(&|m| {
        m.insert("path".into(), json!("/dev/vfio/7"));
    })
    .is_err());
    assert!(wrong(&|m| {
        m.remove("id");
    })
    .is_err());
    assert!(wrong(&|m| {
        m.insert("iommu".into(), json!(true));
    })
    .is_err());
    assert!(wrong(&|_| {}).is_ok(), "the unedited body passes");

    // The CLI form names the same paths and values with the keys Cloud
    // Hypervisor's --device and --platform parsers take, and turns
    // vfio_p2p_dma on, which a device with a clique requires.
    let contract = p2p_tests::ch_contract::contract();
    let cli = &contract["command_line"];
    let device_keys: Vec<&str> = cli["device_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    let text = plan_cli_ch();
    let platform: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("--platform "))
        .collect();
    assert_eq!(platform, ["vfio_p2p_dma=on \\"], "{text}");
    let (key, value) = platform[0].trim_end_matches(" \\").split_once('=').unwrap();
    let allowed = cli["platform_keys"][key].as_array().unwrap();
    assert!(allowed.iter().any(|v| v == value), "{key}={value}");
    let devices: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("--device "))
        .map(|l| l.trim_end_matches(" \\"))
        .collect();
    assert_eq!(devices.len(), bodies.len(), "{text}");
    for (d, b) in devices.iter().zip(&bodies) {
        let mut as_body = serde_json::Map::new();
        for pair in d.split(',') {
            let (k, v) = pair.split_once('=').unwrap();
            assert!(device_keys.contains(&k), "{k} is not a --device key: {d}");
            let v = match k {
                // Parsed as u8 by Cloud Hypervisor's option parser.
                "x_nv_gpudirect_clique" => json!(v.parse::<u8>().unwrap()),
                _ => json!(v),
            };
            as_body.insert(k.to_string(), v);
        }
        let as_body = Value::Object(as_body);
        device.check(&as_body).unwrap();
        assert_eq!(as_body, serde_json::to_value(b).unwrap());
    }
}

fn plan_cli_ch() -> String {
    plan(&["--emit", "cloud-hypervisor"])
}

fn apply(socket: &Path, extra: &[&str]) -> p2p_tests::Run {
    let tree = unpack_fixture(FIXTURE);
    let mut args = vec![
        "apply",
        "--api-socket",
        socket.to_str().unwrap(),
        "--sysfs-root",
        tree.path().to_str().unwrap(),
        "--max-level",
        "pix",
    ];
    args.extend_from_slice(extra);
    run("p2p-host", &args)
}

#[test]
fn apply_hot_adds_every_gpu_and_reports_each_answer() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ch.sock");
    let info = |id: &str, slot: u8| {
        Some(json!({"id": id, "bdf": format!("0000:00:{slot:02x}.0")}).to_string())
    };
    let server = FakeCloudHypervisor::start(
        &sock,
        vec![
            (200, info("ua-vp2p-gpu0", 5)),
            (200, info("ua-vp2p-gpu1", 6)),
            (204, None),
            (200, info("ua-vp2p-gpu3", 8)),
        ],
    );
    let r = apply(&sock, &[]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let got = server.received();
    assert_eq!(got.len(), 4);
    let schema = BodyCheck::request(ADD);
    let answer = BodyCheck::answer(ADD, 200);
    // The stand-in answers only with statuses the contract lists.
    let listed = answer_statuses(ADD);
    assert!([200, 204].iter().all(|s| listed.contains(s)), "{listed:?}");
    for (i, req) in got.iter().enumerate() {
        assert_eq!(req.method, "PUT");
        assert_eq!(req.path, ADD);
        assert_eq!(req.content_type.as_deref(), Some("application/json"));
        let body: Value = serde_json::from_str(&req.body).unwrap();
        schema.check(&body).unwrap();
        assert_eq!(body["x_nv_gpudirect_clique"], i);
        assert_eq!(
            body["path"],
            format!("/sys/bus/pci/devices/0000:00:{:02x}.0/", 6 + i)
        );
    }
    answer
        .check(&serde_json::from_str(&info("a", 1).unwrap()).unwrap())
        .unwrap();
    assert!(
        answer.check(&json!({"id": "a"})).is_err(),
        "bdf is required"
    );
    assert!(
        r.stdout
            .contains("/sys/bus/pci/devices/0000:00:06.0/ clique 0 -> 200"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("/sys/bus/pci/devices/0000:00:08.0/ clique 2 -> 204"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("added 4 GPU(s)"), "{}", r.stdout);
}

#[test]
fn apply_stops_at_the_first_refusal_and_undoes_what_it_added() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ch.sock");
    let server = FakeCloudHypervisor::start(
        &sock,
        vec![
            (
                200,
                Some(json!({"id": "ua-vp2p-gpu0", "bdf": "0000:00:05.0"}).to_string()),
            ),
            (400, Some("\"Error adding device: invalid clique\"".into())),
            (204, None),
            (200, None),
        ],
    );
    let r = apply(&sock, &[]);
    assert_eq!(r.code, Some(1));
    let got = server.received();
    assert_eq!(got.len(), 3, "two adds, then one removal; nothing more");
    assert_eq!(got[2].path, REMOVE);
    assert!(answer_statuses(ADD).contains(&400) && answer_statuses(REMOVE).contains(&204));
    let body: Value = serde_json::from_str(&got[2].body).unwrap();
    let remove = BodyCheck::request(REMOVE);
    remove
        .check(&body)
        .unwrap_or_else(|e| panic!("{body} violates the remove-device contract: {e}"));
    assert!(remove.check(&json!({"id": 7})).is_err());
    assert!(remove.check(&json!({"ids": "ua-vp2p-gpu0"})).is_err());
    assert_eq!(body, json!({"id": "ua-vp2p-gpu0"}));
    assert!(
        r.stderr.contains(
            "refused /sys/bus/pci/devices/0000:00:07.0/ (id ua-vp2p-gpu1, clique 1): HTTP 400"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("invalid clique"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("1 GPU(s) added before it removed again: the VM is as it was"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.contains("removed ua-vp2p-gpu0 again -> 204"),
        "{}",
        r.stdout
    );
    drop(server);

    // --keep-partial leaves the added GPU in place and says so.
    let sock = dir.path().join("ch3.sock");
    let server = FakeCloudHypervisor::start(&sock, vec![(204, None), (400, None), (204, None)]);
    let r = apply(&sock, &["--keep-partial"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(server.received().len(), 2, "no removal with --keep-partial");
    assert!(
        r.stderr
            .contains("1 of 4 GPU(s) added and kept (--keep-partial)"),
        "{}",
        r.stderr
    );
    drop(server);

    let sock = dir.path().join("ch2.sock");
    let server = FakeCloudHypervisor::start(&sock, vec![(404, None)]);
    let r = apply(&sock, &["--vm", "solo=0000:00:09.0"]);
    assert_eq!(r.code, Some(1));
    assert_eq!(server.received().len(), 1);
    assert!(
        r.stderr.contains("HTTP 404; no GPU was added"),
        "{}",
        r.stderr
    );
}

#[test]
fn apply_without_a_server_names_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("absent.sock");
    let r = apply(&sock, &[]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("absent.sock: cannot connect"),
        "{}",
        r.stderr
    );
    let r = apply(&sock, &["--vm", "a=0000:00:06.0", "--vm", "b=0000:00:07.0"]);
    assert!(r.stderr.contains("apply drives one VM"), "{}", r.stderr);
}

#[test]
fn plan_refuses_bad_input() {
    let tree = unpack_fixture(FIXTURE);
    let root = tree.path().to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--vm", "a=0000:00:06.0,0000:41:00.0"],
            "0000:41:00.0 is not a PCI function of this host",
        ),
        (
            &["--vm", "a=0000:00:06.0", "--vm", "b=0000:00:06.0"],
            "0000:00:06.0 is given to two VMs: a and b",
        ),
        (
            &["--vm", "a=0000:00:03.0"],
            "0000:00:03.0 is a network function without an RDMA device",
        ),
        (&["--max-level", "nv18"], "max level must be a PCIe class"),
        (&["--vm", "bad name=0000:00:06.0"], "a VM name is letters"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["plan", "--sysfs-root", root];
        args.extend_from_slice(extra);
        let r = run("p2p-host", &args);
        assert_ne!(r.code, Some(0), "{extra:?} was accepted");
        assert!(r.stderr.contains(needle), "{extra:?}: {}", r.stderr);
    }
}
