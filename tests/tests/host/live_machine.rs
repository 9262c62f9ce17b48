//! The machine the tests run on: its live /sys scans, and a snapshot of it
//! scans to the same topology (the capture loses nothing the analyser uses).

use p2p_host::snapshot::snapshot;
use p2p_host::sysfs::{scan, SysfsRoot};
use p2p_report::TopoReport;
use p2p_tests::e2e::parse_lspci_hex;
use p2p_tests::run;
use p2p_topology::GpuSelector;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[test]
fn live_sys_snapshot_round_trips() {
    let live = SysfsRoot::new("/sys").expect("/sys is a sysfs tree");
    assert!(live.is_live());
    let topo = scan(&live).expect("live /sys scans");
    assert!(
        !topo.functions.is_empty(),
        "no PCI functions on this machine"
    );
    assert!(!topo.host_bridges.is_empty());

    let out = tempfile::tempdir().unwrap();
    let summary = snapshot(&live, out.path()).unwrap();
    assert_eq!(summary.functions, topo.functions.len());
    let copy = scan(&SysfsRoot::new(out.path()).unwrap()).unwrap();
    // Paths inside ACS "unknown" reasons name the tree they came from; compare the rest.
    let strip = |t: &p2p_topology::Topology| {
        serde_json::to_string(t)
            .unwrap()
            .replace(&format!("{}", out.path().join("sysfs").display()), "/sys")
    };
    assert_eq!(
        strip(&copy),
        strip(&topo),
        "snapshot scans differently from the live tree"
    );

    // Snapshots of snapshots are identical too (the capture is a fixed point).
    let out2 = tempfile::tempdir().unwrap();
    snapshot(&SysfsRoot::new(out.path()).unwrap(), out2.path()).unwrap();
    let copy2 = scan(&SysfsRoot::new(out2.path()).unwrap()).unwrap();
    assert_eq!(
        serde_json::to_string(&copy2)
            .unwrap()
            .replace(&format!("{}", out2.path().display()), "X"),
        serde_json::to_string(&copy)
            .unwrap()
            .replace(&format!("{}", out.path().display()), "X")
    );
}

#[test]
fn live_sys_config_access_matches_privilege() {
    let topo = scan(&SysfsRoot::new("/sys").unwrap()).unwrap();
    let short = topo.functions.iter().filter(|f| f.config_len < 256).count();
    if is_root() {
        assert_eq!(short, 0, "root reads full config space");
        assert!(topo.notes.iter().all(|n| !n.contains("64 bytes")));
    } else {
        assert_eq!(short, topo.functions.len(), "non-root reads 64 bytes");
        assert!(topo.notes.iter().any(|n| n.contains("64 bytes")));
    }
}

#[test]
fn live_topo_runs_and_reports_every_function_class() {
    let topo = scan(&SysfsRoot::new("/sys").unwrap()).unwrap();
    // Every function is a GPU under this selector: the matrix covers all pairs.
    let sel = GpuSelector::List {
        bdfs: topo
            .functions
            .iter()
            .filter(|f| !f.is_bridge)
            .map(|f| f.bdf)
            .collect(),
    };
    let report = TopoReport::build(&topo, &sel, "/sys");
    let n = report.gpus.len();
    assert_eq!(report.links.len(), n);
    assert_eq!(report.pairs.len(), n * n.saturating_sub(1) / 2);
    for (i, row) in report.links.iter().enumerate() {
        assert_eq!(row[i].to_string(), "X");
        for (j, c) in row.iter().enumerate() {
            assert_eq!(*c, report.links[j][i], "matrix is symmetric");
        }
    }
    // Every function and its class, as lspci reads them (outside vp2p): each
    // function that is not a PCI-to-PCI bridge (header type 1), in address
    // order, with its 24-bit class code (config bytes 0x0b base, 0x0a sub,
    // 0x09 programming interface).
    let lspci = std::process::Command::new("lspci")
        .args(["-D", "-n", "-x"])
        .output()
        .expect("lspci runs (pciutils, scripts/setup.sh installs it)");
    assert!(lspci.status.success(), "lspci -Dnx failed");
    let configs = parse_lspci_hex(&String::from_utf8_lossy(&lspci.stdout));
    let want: Vec<(String, String)> = configs
        .iter()
        .filter(|(_, c)| c[0x0e] & 0x7f != 1)
        .map(|(bdf, c)| {
            let class = (u32::from(c[0x0b]) << 16) | (u32::from(c[0x0a]) << 8) | u32::from(c[0x09]);
            (bdf.clone(), format!("{class:#08x}"))
        })
        .collect();
    assert!(!want.is_empty(), "lspci lists no function");
    let got: Vec<(String, String)> = report
        .gpus
        .iter()
        .map(|g| (g.bdf.to_string(), g.class.clone()))
        .collect();
    assert_eq!(got, want, "the report's functions and classes vs lspci's");

    // The binary, asked for the same functions, reports the same classes.
    let list: Vec<&str> = want.iter().map(|(b, _)| b.as_str()).collect();
    let r = run("p2p-host", &["topo", "--json", "--gpus", &list.join(",")]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["sysfs_root"], "/sys");
    let got: Vec<(String, String)> = v["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| {
            (
                g["bdf"].as_str().unwrap().to_string(),
                g["class"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, want, "p2p-host topo --json --gpus ... vs lspci");
}

#[test]
fn captured_dev_machine_tree() {
    // The development VM, captured with `p2p-host snapshot` as root: one host
    // bridge, virtio functions straight on it, full config spaces, NUMA node 0.
    let root = SysfsRoot::new(p2p_tests::fixture_dir("dev-vm-firecracker")).unwrap();
    let topo = scan(&root).unwrap();
    assert_eq!(topo.functions.len(), 6);
    assert_eq!(topo.host_bridges.len(), 1);
    assert!(topo
        .functions
        .iter()
        .all(|f| f.parent.is_none() && f.config_len >= 256));
    assert_eq!(topo.numa_nodes.len(), 1);
    let sel = GpuSelector::List {
        bdfs: vec![
            "0000:00:01.0".parse().unwrap(),
            "0000:00:02.0".parse().unwrap(),
        ],
    };
    let report = TopoReport::build(&topo, &sel, "fixture");
    assert_eq!(report.links[0][1].to_string(), "PHB");
    assert_eq!(
        report.numa_affinity(&report.gpus[0]),
        Some(0),
        "derived from node0's cpulist"
    );
}
