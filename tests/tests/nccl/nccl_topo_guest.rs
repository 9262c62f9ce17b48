//! `p2p-guest nccl-topo` on the captured guest of boot.sh's `vfio-user-gpus`
//! (six served H200s whose capabilities carry cliques 0,0,0,1,2,2; see the
//! fixture's capture.txt): the derived file puts each clique below its own
//! switch, and `install` accepts a file that matches the VM and refuses, by
//! bus id, one that does not.

use p2p_tests::{fixture_dir, run};

const GUEST: &str = "qemu-11.1-vfio-user-gpus";

fn guest(args: &[&str]) -> p2p_tests::Run {
    run("p2p-guest", args)
}

#[test]
fn derived_file_groups_each_clique_and_installs() {
    let root = fixture_dir(GUEST);
    let root = root.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run/nvidia-topologyd/virtualTopology.xml");
    let r = guest(&[
        "nccl-topo",
        "--sysfs-root",
        root,
        "--json",
        "--install",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["schema"], "vp2p.nccl-topo/1");
    // capture.txt: gpu0-2 clique 0, gpu3 clique 1, gpu4-5 clique 2.
    let by_gpu: Vec<(String, u64, String)> = v["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["busid"].as_str().unwrap().to_string(),
                g["clique"].as_u64().unwrap(),
                g["switch"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("0000:23:00.0", 0, "0000:ff:00.0"),
        ("0000:24:00.0", 0, "0000:ff:00.0"),
        ("0000:25:00.0", 0, "0000:ff:00.0"),
        ("0000:41:00.0", 1, "0000:ff:01.0"),
        ("0000:83:00.0", 2, "0000:ff:02.0"),
        ("0000:84:00.0", 2, "0000:ff:02.0"),
    ];
    let want: Vec<(String, u64, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), *b, c.to_string()))
        .collect();
    assert_eq!(by_gpu, want);
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written, v["xml"].as_str().unwrap());
    // Clique 2 sits below NUMA node 1, the rest below node 0.
    assert!(
        written.contains("<cpu numaid=\"1\">\n    <pci busid=\"0000:ff:02.0\""),
        "{written}"
    );

    // The same file installs: every bus id checked against the guest.
    let r = guest(&[
        "nccl-topo",
        "install",
        "--from",
        out.to_str().unwrap(),
        "--sysfs-root",
        root,
        "--dry-run",
        "--json",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 9, "three switches and six GPUs");
    assert!(checks.iter().all(|c| c["ok"] == true));
    assert!(v["installed"].is_null(), "--dry-run writes nothing");
}

#[test]
fn install_refuses_a_file_for_another_vm() {
    let root = fixture_dir(GUEST);
    let root = root.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.xml");
    let r = guest(&[
        "nccl-topo",
        "--sysfs-root",
        root,
        "--install",
        "--out",
        good.to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let text = std::fs::read_to_string(&good).unwrap();
    let out = dir.path().join("installed.xml");
    let try_install = |name: &str, body: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, body).unwrap();
        guest(&[
            "nccl-topo",
            "install",
            "--from",
            f.to_str().unwrap(),
            "--sysfs-root",
            root,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    // A GPU this VM does not have.
    let r = try_install("gone.xml", &text.replace("0000:41:00.0", "0000:42:00.0"));
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(
            "0000:42:00.0: file says class 0x030200 0x10de:0x2335, guest has no such function"
        ),
        "{}",
        r.stderr
    );
    // Another device id at a bus id the VM has.
    let r = try_install(
        "other.xml",
        &text.replacen("device=\"0x2335\"", "device=\"0x2330\"", 1),
    );
    assert!(
        r.stderr.contains("guest has class 0x030200 0x10de:0x2335"),
        "{}",
        r.stderr
    );
    // An invented switch on a real GPU's bus id (NCCL would take its class).
    let r = try_install("clash.xml", &text.replace("0000:ff:01.0", "0000:83:00.0"));
    assert!(
        r.stderr.contains("0000:83:00.0: file says switch"),
        "{}",
        r.stderr
    );
    // A version NCCL 2.28 refuses, named with its line and NCCL's message.
    let r = try_install("v2.xml", &text.replace("version=\"1\"", "version=\"2\""));
    assert!(
        r.stderr.contains(
            "v2.xml: NCCL 2.28.3 refuses this file at initialisation (ncclCommInitAll fails): \
             line 1: <system version=\"2\"> version: NCCL prints \"NCCL WARN XML Topology has \
             wrong version 2, 1 needed\" -> ncclInvalidUsage"
        ),
        "{}",
        r.stderr
    );
    // An id wider than its attribute, named with its line and attribute in
    // the words of every hex reader (p2p_topology::hex).
    let line = 1 + text
        .lines()
        .position(|l| l.contains("device=\"0x2335\""))
        .unwrap();
    let r = try_install(
        "wide.xml",
        &text.replacen("device=\"0x2335\"", "device=\"0x12335\"", 1),
    );
    assert!(
        r.stderr.contains(&format!(
            "wide.xml:{line}: device: '0x12335' is not a hex number of at most 16 bits"
        )),
        "{}",
        r.stderr
    );
    // Not XML at all.
    let r = try_install(
        "junk.xml",
        "<system version=\"1\">\n  <cpu numaid=\"0\">\n</system>\n",
    );
    assert!(
        r.stderr
            .contains("line 3: </system>: NCCL prints \"NCCL WARN XML Mismatch : cpu / system\""),
        "{}",
        r.stderr
    );
    assert!(!out.exists(), "nothing was installed");
    // No fw_cfg in a captured tree: the error says what to do.
    let r = guest(&[
        "nccl-topo",
        "install",
        "--sysfs-root",
        root,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        r.stderr.contains("no fw_cfg file here") && r.stderr.contains("modprobe qemu_fw_cfg"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_host_file_for_a_flat_layout_does_not_fit_a_mirrored_guest() {
    // The host wrote the file for a flat VM (GPUs at 00:10.0..): this guest,
    // laid out otherwise, must refuse it, naming the first missing GPU.
    let root = fixture_dir(GUEST);
    let root = root.to_str().unwrap();
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            root,
            "--no-nvml",
            "--emit",
            "nccl-topo",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("flat.xml");
    std::fs::write(&f, &r.stdout).unwrap();
    let r = guest(&[
        "nccl-topo",
        "install",
        "--from",
        f.to_str().unwrap(),
        "--sysfs-root",
        root,
        "--dry-run",
    ]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("0000:00:10.0: file says class 0x030200"),
        "{}",
        r.stderr
    );
}
