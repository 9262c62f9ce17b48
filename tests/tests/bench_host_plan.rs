//! `p2p-guest bench --host-plan FILE` without a GPU: the mapping from a host
//! plan's pairs (host addresses) to the guest's addresses, on a plan recorded
//! from the captured pcie-costs tree (tests/fixtures/host-plans/
//! pcie-costs-mirror.json, `p2p-host plan --json --guest-topology mirror`;
//! the fixtures README gives the command).
//!
//! The expected routes come from QEMU's command line of that tree
//! (tests/fixtures/qemu-11.1-pcie-costs-iommu-on/capture.txt, mapped in
//! tests/tests/check_pcie_costs.rs): 23:00.0, 24:00.0 and 25:00.0 below
//! switch sw0 (upstream port 21:00.0, no ACS on its downstream ports), 26:00.0
//! on another root port of pxb0 (NUMA node 0), 81:00.0 and 82:00.0 on two
//! root ports of pxb1 (NUMA node 1).

use std::path::PathBuf;

use p2p_guest::bench::host_plan::{route_name, HostPlanError, HostRoutes};
use p2p_shared::{Bdf, PeerRoute};
use p2p_tests::{fixture_dir, repo_root, run};
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

#[test]
fn the_recorded_plan_is_what_plan_prints_today() {
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
