//! `p2p-guest bench --host-plan FILE` without a GPU: the mapping from a host
//! plan's pairs (host addresses) to the guest's addresses, on a plan recorded
//! from the captured pcie-costs tree (tests/fixtures/host-plans/
//! pcie-costs-mirror.json, `p2p-host plan --json --guest-topology mirror`;
//! the fixtures README gives the command).
//!
//! The expected routes are derived by hand from the tree's bridges, ACS and
//! ATS (`derived_routes` says how; QEMU's command line in
//! tests/fixtures/qemu-11.1-pcie-costs-iommu-on/capture.txt built it: switch
//! sw0 with upstream port 21:00.0 above 23:00.0, 24:00.0 and 25:00.0, 26:00.0
//! on another root port of pxb0 on NUMA node 0, 81:00.0 and 82:00.0 on two
//! root ports of pxb1 on node 1), and compared with what `plan` prints today
//! and with the recorded plan.

use std::path::PathBuf;

use p2p_guest::bench::host_plan::{route_name, HostPlanError, HostRoutes};
use p2p_tests::{fixture_dir, repo_root, run};
use p2p_topology::{Bdf, PeerRoute};
use serde_json::Value;

const TREE: &str = "tests/fixtures/qemu-11.1-pcie-costs-iommu-on";
const VM: &str =
    "vm0=0000:23:00.0,0000:24:00.0,0000:25:00.0,0000:26:00.0,0000:81:00.0,0000:82:00.0";

fn recorded() -> PathBuf {
    fixture_dir("host-plans").join("pcie-costs-mirror.json")
}

fn bdf(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// The tree's directory of `bdf` under sysfs/devices, as path components
/// from its host bridge (`pci0000:20`, `0000:20:00.0`, ...), read from the
/// kernel's `bus/pci/devices` link.
fn ancestry(bdf: &str) -> Vec<String> {
    let link = repo_root()
        .join(TREE)
        .join("sysfs/bus/pci/devices")
        .join(bdf);
    let target = std::fs::read_link(&link).unwrap();
    let parts: Vec<String> = target
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let from = parts
        .iter()
        .position(|p| p.starts_with("pci0000:"))
        .unwrap();
    parts[from..].to_vec()
}

/// The extended capabilities of `bdf`'s config space: (id, offset), walked
/// from 0x100 by the PCIe Base Specification's header layout (id in bits
/// 15:0, next offset in bits 31:20).
fn extended_capabilities(bdf: &str) -> Vec<(u16, usize)> {
    let config = std::fs::read(
        repo_root()
            .join(TREE)
            .join("sysfs/bus/pci/devices")
            .join(bdf)
            .join("config"),
    )
    .unwrap();
    let mut out = Vec::new();
    let mut at = 0x100;
    while at != 0 && at + 4 <= config.len() && out.len() < 64 {
        let header = u32::from_le_bytes(config[at..at + 4].try_into().unwrap());
        if header == 0 {
            break;
        }
        out.push(((header & 0xffff) as u16, at));
        at = (header >> 20) as usize;
    }
    out
}

/// The host plan's route for every pair, derived by hand from the tree
/// (the sysfs directories and config spaces of
/// tests/fixtures/qemu-11.1-pcie-costs-iommu-on, which
/// `the_tree_is_as_the_derivation_reads_it` checks):
///
/// - Bridges: 23:00.0, 24:00.0 and 25:00.0 sit below the downstream ports
///   22:00.0, 22:01.0 and 22:02.0 of one switch whose upstream port is
///   21:00.0, on root port 20:00.0 of host bridge pci0000:20. 26:00.0 sits on
///   root port 20:01.0 of the same host bridge. 81:00.0 and 82:00.0 sit on
///   root ports 80:00.0 and 80:01.0 of host bridge pci0000:80.
/// - So any two of 23, 24, 25 meet at the upstream port 21:00.0, entering it
///   through two downstream ports. Those ports have no ACS capability (their
///   extended list holds only AER), so nothing redirects a request upstream:
///   the route is `switch` at 21:00.0.
/// - 26 with any of 23, 24, 25 meet only at host bridge pci0000:20 (different
///   root ports): `root_complex` pci0000:20. Root port 20:00.0 does have ACS
///   with P2P Request Redirect on (control 0x001d), but a pair that meets at
///   the root complex goes through it either way, so it changes nothing.
/// - 81 with 82: `root_complex` pci0000:80, the same way.
/// - Any of 23..26 with 81 or 82: host bridges pci0000:20 (NUMA node 0) and
///   pci0000:80 (NUMA node 1), different nodes: `sockets`.
/// - ATS is on at 23, 24, 26 and 81 (an ATS capability, id 0x000F, with
///   Enable, bit 15 of its control register, set) and absent at 25 and 82. It
///   decides whether requests carry translated addresses, not where a pair's
///   paths meet: with no ACS on the switch's ports there is no Direct
///   Translated P2P to turn on, so no route above depends on it.
fn derived_routes() -> Vec<(&'static str, &'static str, PeerRoute)> {
    let switch = PeerRoute::Switch {
        at: bdf("0000:21:00.0"),
    };
    let rc = |hb: &str| PeerRoute::RootComplex {
        host_bridge: hb.into(),
    };
    vec![
        ("0000:23:00.0", "0000:24:00.0", switch.clone()),
        ("0000:23:00.0", "0000:25:00.0", switch.clone()),
        ("0000:24:00.0", "0000:25:00.0", switch),
        ("0000:23:00.0", "0000:26:00.0", rc("pci0000:20")),
        ("0000:24:00.0", "0000:26:00.0", rc("pci0000:20")),
        ("0000:25:00.0", "0000:26:00.0", rc("pci0000:20")),
        ("0000:81:00.0", "0000:82:00.0", rc("pci0000:80")),
        ("0000:23:00.0", "0000:81:00.0", PeerRoute::Sockets),
        ("0000:23:00.0", "0000:82:00.0", PeerRoute::Sockets),
        ("0000:24:00.0", "0000:81:00.0", PeerRoute::Sockets),
        ("0000:24:00.0", "0000:82:00.0", PeerRoute::Sockets),
        ("0000:25:00.0", "0000:81:00.0", PeerRoute::Sockets),
        ("0000:25:00.0", "0000:82:00.0", PeerRoute::Sockets),
        ("0000:26:00.0", "0000:81:00.0", PeerRoute::Sockets),
        ("0000:26:00.0", "0000:82:00.0", PeerRoute::Sockets),
    ]
}

/// The facts of the tree `derived_routes` reads, read here without vp2p's code.
#[test]
fn the_tree_is_as_the_derivation_reads_it() {
    let chain = |parts: &[&str]| parts.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    let sw = ["pci0000:20", "0000:20:00.0", "0000:21:00.0"];
    for (dev, port) in [
        ("0000:23:00.0", "0000:22:00.0"),
        ("0000:24:00.0", "0000:22:01.0"),
        ("0000:25:00.0", "0000:22:02.0"),
    ] {
        assert_eq!(ancestry(dev), chain(&[&sw[..], &[port, dev]].concat()));
    }
    assert_eq!(
        ancestry("0000:26:00.0"),
        chain(&["pci0000:20", "0000:20:01.0", "0000:26:00.0"])
    );
    assert_eq!(
        ancestry("0000:81:00.0"),
        chain(&["pci0000:80", "0000:80:00.0", "0000:81:00.0"])
    );
    assert_eq!(
        ancestry("0000:82:00.0"),
        chain(&["pci0000:80", "0000:80:01.0", "0000:82:00.0"])
    );
    // No ACS (extended capability 0x000D) on the switch's downstream ports.
    for port in ["0000:22:00.0", "0000:22:01.0", "0000:22:02.0"] {
        assert!(
            extended_capabilities(port).iter().all(|c| c.0 != 0x000d),
            "{port}: {:?}",
            extended_capabilities(port)
        );
    }
    // NUMA nodes of the two host bridges' functions.
    let node = |bdf: &str| {
        std::fs::read_to_string(
            repo_root()
                .join(TREE)
                .join("sysfs/bus/pci/devices")
                .join(bdf)
                .join("numa_node"),
        )
        .unwrap()
        .trim()
        .to_string()
    };
    for d in [
        "0000:20:00.0",
        "0000:20:01.0",
        "0000:23:00.0",
        "0000:26:00.0",
    ] {
        assert_eq!(node(d), "0", "{d}");
    }
    for d in [
        "0000:80:00.0",
        "0000:80:01.0",
        "0000:81:00.0",
        "0000:82:00.0",
    ] {
        assert_eq!(node(d), "1", "{d}");
    }
    // ATS on (control bit 15) where the derivation says, absent elsewhere.
    let config = |bdf: &str| {
        std::fs::read(
            repo_root()
                .join(TREE)
                .join("sysfs/bus/pci/devices")
                .join(bdf)
                .join("config"),
        )
        .unwrap()
    };
    for d in [
        "0000:23:00.0",
        "0000:24:00.0",
        "0000:26:00.0",
        "0000:81:00.0",
    ] {
        let (_, at) = *extended_capabilities(d)
            .iter()
            .find(|c| c.0 == 0x000f)
            .unwrap_or_else(|| panic!("{d}: no ATS"));
        let control = u16::from_le_bytes([config(d)[at + 6], config(d)[at + 7]]);
        assert_ne!(control & 0x8000, 0, "{d}: ATS not enabled");
    }
    for d in ["0000:25:00.0", "0000:82:00.0"] {
        assert!(
            extended_capabilities(d).iter().all(|c| c.0 != 0x000f),
            "{d}"
        );
    }
}

/// The routes of `plan --json` (`vms[0].pairs[].route`) by unordered pair.
fn routes_of(plan: &Value) -> Vec<(String, String, PeerRoute)> {
    plan["vms"][0]["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let (a, b) = (p["a"].as_str().unwrap(), p["b"].as_str().unwrap());
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            let route: PeerRoute = serde_json::from_value(p["route"].clone())
                .unwrap_or_else(|e| panic!("{a} {b}: {e}"));
            (a.to_string(), b.to_string(), route)
        })
        .collect()
}

fn sorted(mut v: Vec<(String, String, PeerRoute)>) -> Vec<(String, String, PeerRoute)> {
    v.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
    v
}

/// What `plan` prints today and the plan bench reads (recorded) both carry
/// the routes derived by hand from the tree.
#[test]
fn plan_routes_are_the_ones_derived_from_the_tree() {
    let want = sorted(
        derived_routes()
            .into_iter()
            .map(|(a, b, r)| (a.to_string(), b.to_string(), r))
            .collect(),
    );
    assert_eq!(want.len(), 15, "6 GPUs, 15 unordered pairs");
    let root = repo_root().join(TREE);
    let args = [
        "plan",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--gpu-class",
        "0100",
        "--guest-topology",
        "mirror",
        "--vm",
        VM,
        "--json",
    ];
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let now: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        sorted(routes_of(&now)),
        want,
        "plan today vs the derivation"
    );
    let then: Value = serde_json::from_str(&std::fs::read_to_string(recorded()).unwrap()).unwrap();
    assert_eq!(
        sorted(routes_of(&then)),
        want,
        "{} vs the derivation",
        recorded().display()
    );
}

/// Freshness only: the recorded plan (which `bench --host-plan` reads) is
/// what `plan` prints today, so the file is regenerated when the plan's format
/// changes. Its routes are checked against the tree above, not here.
#[test]
fn the_recorded_plan_is_current_freshness_check() {
    let root = repo_root().join(TREE);
    let args = [
        "plan",
        "--sysfs-root",
        root.to_str().unwrap(),
        "--gpu-class",
        "0100",
        "--guest-topology",
        "mirror",
        "--vm",
        VM,
        "--json",
    ];
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let mut now: Value = serde_json::from_str(&r.stdout).unwrap();
    let mut then: Value =
        serde_json::from_str(&std::fs::read_to_string(recorded()).unwrap()).unwrap();
    // The path the plan was made from differs (absolute here, relative there).
    now["sysfs_root"] = Value::Null;
    then["sysfs_root"] = Value::Null;
    assert_eq!(
        now,
        then,
        "regenerate {} (tests/fixtures/README.md gives the command)",
        recorded().display()
    );
}

#[test]
fn routes_are_found_by_guest_address() {
    let h = HostRoutes::load(&recorded(), None).unwrap();
    assert_eq!(h.vm, "vm0");
    assert_eq!(h.len(), 15, "6 GPUs, 15 unordered pairs");
    // The mirrored layout keeps pxb0's buses (23..26 as on the host) and
    // renumbers pxb1's devices to 31:00.0 and 32:00.0 (guests[0].devices);
    // the routes follow the host's places, found by the guest's addresses.
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(recorded()).unwrap()).unwrap();
    let guest_of = |host: &str| {
        plan["guests"][0]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["host"] == host)
            .map(|d| bdf(d["guest"].as_str().unwrap()))
            .unwrap()
    };
    let (d0, d1, d2, d3, d4, d5) = (
        guest_of("0000:23:00.0"),
        guest_of("0000:24:00.0"),
        guest_of("0000:25:00.0"),
        guest_of("0000:26:00.0"),
        guest_of("0000:81:00.0"),
        guest_of("0000:82:00.0"),
    );
    assert_ne!(
        d4,
        bdf("0000:81:00.0"),
        "a layout that renumbers, so the mapping is seen"
    );
    let switch = PeerRoute::Switch {
        at: bdf("0000:21:00.0"),
    };
    for (a, b) in [(d0, d1), (d1, d0), (d0, d2), (d1, d2)] {
        assert_eq!(h.route(a, b), Some(&switch), "{a} {b}");
    }
    let rc = |hb: &str| PeerRoute::RootComplex {
        host_bridge: hb.into(),
    };
    for a in [d0, d1, d2] {
        assert_eq!(h.route(a, d3), Some(&rc("pci0000:20")));
    }
    assert_eq!(h.route(d5, d4), Some(&rc("pci0000:80")));
    for a in [d0, d1, d2, d3] {
        for b in [d4, d5] {
            assert_eq!(h.route(a, b), Some(&PeerRoute::Sockets), "{a} {b}");
        }
    }
    // A host address the guest does not use finds nothing.
    assert_eq!(h.route(bdf("0000:81:00.0"), bdf("0000:82:00.0")), None);
    // The names bench records after `pcie-` / `pcie-ats-`.
    assert_eq!(route_name(&switch), "switch");
    assert_eq!(route_name(&rc("pci0000:20")), "root-complex");
    assert_eq!(route_name(&PeerRoute::Sockets), "sockets");
}

/// Writes `plan` to a temporary file and loads it for `vm`.
fn load_edited(
    plan: &Value,
    vm: Option<&str>,
) -> (tempfile::TempDir, Result<HostRoutes, HostPlanError>) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("plan.json");
    std::fs::write(&f, serde_json::to_string(plan).unwrap()).unwrap();
    let r = HostRoutes::load(&f, vm);
    (dir, r)
}

#[test]
fn bad_plans_are_refused_naming_file_vm_and_pair() {
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(recorded()).unwrap()).unwrap();
    // A plan from before routes were kept: the pair is named.
    let mut old = plan.clone();
    for p in old["vms"][0]["pairs"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("route");
    }
    let (_d, r) = load_edited(&old, None);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("plan.json: VM vm0 pair 0000:23:00.0 0000:24:00.0 carries no route"),
        "{e}"
    );
    // Two VMs: which one must be said.
    let mut two = plan.clone();
    let mut vm1 = two["vms"][0].clone();
    vm1["vm"] = "vm1".into();
    two["vms"].as_array_mut().unwrap().push(vm1);
    let g = two["guests"][0].clone();
    two["guests"].as_array_mut().unwrap().push(g);
    let (_d, r) = load_edited(&two, None);
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("it plans 2 VMs (vm0, vm1); name this one with --host-plan-vm"),
        "{e}"
    );
    let (_d, r) = load_edited(&two, Some("vm1"));
    assert_eq!(r.unwrap().vm, "vm1");
    let (_d, r) = load_edited(&two, Some("vm7"));
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("no VM vm7 (it plans vm0, vm1)"));
    // No guest layout.
    let mut bare = plan.clone();
    bare["guests"] = Value::Array(vec![]);
    let (_d, r) = load_edited(&bare, None);
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("no guest layout (guests[]) for VM vm0"));
    // Not a plan at all, and a missing file.
    let (_d, r) = load_edited(&serde_json::json!({"schema": "vp2p.check/1"}), None);
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("not a p2p-host plan --json document"));
    let e = HostRoutes::load(std::path::Path::new("/nonexistent/plan.json"), None).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--host-plan /nonexistent/plan.json: "),
        "{e}"
    );
}
