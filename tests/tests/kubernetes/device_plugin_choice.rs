//! `p2p-host device-plugin`'s GetPreferredAllocation is `p2p-host allocate`'s
//! answer: on the nested-switch tree (as tests/tests/kubernetes/device_plugin.rs sets
//! it up: five NVMe functions relinked to vfio-pci) for the default policy,
//! for `--max-level pix --strict`, for a GPU named twice, and on the
//! captured 4x H200 VM with an operator's NVLink map.

use p2p_host_kube::device_plugin::api::*;
use p2p_tests::kubelet::*;
use p2p_tests::process::SpawnOwned;
use p2p_tests::run;
use std::path::Path;
use tonic::Code;

/// `p2p-host allocate`'s first line for the same question.
fn allocate_cli(tree: &Path, available: &[&str], must: &[&str], size: i32) -> Vec<String> {
    let tree = tree.to_str().unwrap();
    let avail = available.join(",");
    let size = size.to_string();
    let mut args = vec![
        "allocate",
        "--sysfs-root",
        tree,
        "--gpu-class",
        "0108",
        "--available",
        &avail,
        "--size",
        &size,
    ];
    let must = must.join(",");
    if !must.is_empty() {
        args.extend(["--must-include", &must]);
    }
    let r = run("p2p-host", &args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    first.split(',').map(str::to_string).collect()
}

#[tokio::test]
async fn preferred_allocation_is_allocates_answer() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let cases: [(&[&str], &[&str], i32); 5] = [
        (&GPUS, &[], 1),
        (&GPUS, &[], 2),
        (&GPUS, &[], 4),
        (&GPUS, &["0000:81:00.0"], 2),
        (&["0000:27:00.0", "0000:28:00.0", "0000:81:00.0"], &[], 2),
    ];
    for (available, must, size) in cases {
        let got = c
            .get_preferred_allocation(preferred_request(available, must, size))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(got.container_responses.len(), 1);
        let want = allocate_cli(&s.tree, available, must, size);
        assert_eq!(
            got.container_responses[0].device_i_ds, want,
            "{available:?} {must:?} {size}"
        );
    }
    // By hand (docs/choosing.md): one GPU of five is 81:00.0, leaving the
    // other four one block.
    let one = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(one.container_responses[0].device_i_ds, ["0000:81:00.0"]);
}

/// The chooser's policy options reach GetPreferredAllocation: under
/// `--max-level pix --strict`, on the nested-switch tree (25 and 26 PIX under
/// the inner switch, 27 PXB to them, 28 PHB, 81 SYS: `p2p-host topo`), four
/// GPUs are no clique, so the plugin refuses as `allocate --max-level pix
/// --strict` does, and two are the one PIX pair.
#[tokio::test]
async fn policy_options_reach_preferred_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let tree = vfio_tree(dir.path());
    let mut kubelet = start_kubelet(dir.path());
    let _plugin = start_plugin_with(dir.path(), &tree, &["--max-level", "pix", "--strict"]);
    let reg = kubelet.next_registration().await;
    let mut c = client(dir.path(), &reg).await;
    let err = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 4))
        .await
        .unwrap_err();
    let t = tree.to_str().unwrap();
    let avail = GPUS.join(",");
    let cli = run(
        "p2p-host",
        &[
            "allocate",
            "--sysfs-root",
            t,
            "--gpu-class",
            "0108",
            "--available",
            &avail,
            "--size",
            "4",
            "--max-level",
            "pix",
            "--strict",
        ],
    );
    assert_eq!(cli.code, Some(3), "{}", cli.stdout);
    // The chooser's refusal, in its words, from both (the message is the
    // one derived by hand from the tree: the PIX pairs are 25/26 only).
    let refusal = "no 4 available GPUs form one clique under PIX (the largest has 2); \
                   raise --max-level or ask for fewer";
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), refusal);
    assert!(
        cli.stderr.contains(refusal),
        "allocate's stderr: {}",
        cli.stderr
    );
    let two = c
        .get_preferred_allocation(preferred_request(&GPUS, &[], 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        two.container_responses[0].device_i_ds,
        ["0000:25:00.0", "0000:26:00.0"]
    );
}

/// Allocate refuses a list naming a GPU twice, as GetPreferredAllocation
/// does (and as the chooser says it), rather than answering with the
/// address repeated in PCI_RESOURCE_<NAME>.
#[tokio::test]
async fn allocate_refuses_duplicate_ids_as_preferred_allocation_does() {
    let s = setup().await;
    let mut c = client(s.dir.path(), &s.first).await;
    let twice = ["0000:25:00.0", "0000:28:00.0", "0000:25:00.0"];
    let pref = c
        .get_preferred_allocation(preferred_request(&twice, &[], 1))
        .await
        .unwrap_err();
    let alloc = c
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids(&twice),
            }],
        })
        .await
        .unwrap_err();
    for e in [&pref, &alloc] {
        assert_eq!(e.code(), Code::InvalidArgument);
        assert_eq!(e.message(), "0000:25:00.0 is listed twice");
    }
}

/// On NVIDIA GPUs the plugin reads NVLinks as `allocate` does: the four
/// H200s of the captured 4x H200 VM (one flat bus, no switch: every PCIe
/// pair alike), relinked to vfio-pci, with an operator's map that links only
/// 00:07.0 and 00:09.0. Two of four is then that pair, by hand (the only
/// NVLinked pair), and `allocate --nvlink` with the same map says the same.
#[tokio::test]
async fn preferred_allocation_reads_nvlinks_as_allocate_does() {
    let dir = tempfile::tempdir().unwrap();
    let unpacked = p2p_tests::unpack_fixture("h200x4-passthrough-guest");
    let tree = dir.path().join("sysfs");
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(unpacked.path().join("sysfs"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(ok.success());
    let gpus = [
        "0000:00:06.0",
        "0000:00:07.0",
        "0000:00:08.0",
        "0000:00:09.0",
    ];
    for g in gpus {
        rebind(&tree, g, "vfio-pci");
    }
    let map = dir.path().join("nvlink.json");
    std::fs::write(
        &map,
        r#"{"links": [{"a": "0000:00:07.0", "b": "0000:00:09.0", "count": 18}]}"#,
    )
    .unwrap();
    let mut kubelet = start_kubelet(dir.path());
    let _plugin = Plugin(
        std::process::Command::new(p2p_tests::binary("p2p-host"))
            .args(["device-plugin", "--resource", RESOURCE, "--no-nvml"])
            .arg("--nvlink")
            .arg(&map)
            .arg("--kubelet-dir")
            .arg(dir.path())
            .arg("--sysfs-root")
            .arg(&tree)
            .stdout(std::process::Stdio::null())
            .spawn_owned()
            .unwrap(),
    );
    let reg = kubelet.next_registration().await;
    let mut c = client(dir.path(), &reg).await;
    let got = c
        .get_preferred_allocation(preferred_request(&gpus, &[], 2))
        .await
        .unwrap()
        .into_inner();
    let got = &got.container_responses[0].device_i_ds;
    assert_eq!(got, &["0000:00:07.0", "0000:00:09.0"]);
    let r = run(
        "p2p-host",
        &[
            "allocate",
            "--sysfs-root",
            tree.to_str().unwrap(),
            "--no-nvml",
            "--nvlink",
            map.to_str().unwrap(),
            "--available",
            &gpus.join(","),
            "--size",
            "2",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout.lines().next().unwrap(), got.join(","));
}
