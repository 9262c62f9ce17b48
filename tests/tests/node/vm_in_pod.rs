//! The mission end to end, scheduler -> kubelet -> vp2p -> runtime -> VMM ->
//! guest: a pod of vp2p's vm-launcher image claims two peer GPUs through the
//! shipped tiered template; its container (`vp2p-vm`, as KubeVirt's launcher
//! would run it) passes the pod's two VFIO functions to QEMU 11.1 as vfio-pci
//! with the cliques `p2p-host plan` gives for them (QEMU's
//! x-nv-gpudirect-clique; the stand-ins' vendor id overridden to NVIDIA's,
//! whose devices alone QEMU writes the capability on), and inside that guest
//! `p2p-guest probe --json` reads the capability QEMU's quirk wrote, byte for
//! byte as the plan says. TCG inside a TCG guest: the time is printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use p2p_tests::repo_root;
use p2p_tests::sandbox_node::{boot_node, helm_install, one_node_at_a_time, poll, try_get};
use p2p_topology::{Clique, P2pCapability};
use serde_json::Value;

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: vm
  namespace: default
spec:
  restartPolicy: Never
  resourceClaims:
    - name: gpus
      resourceClaimTemplateName: two-peer-gpus-tiered
  containers:
    - name: vm
      image: localhost/vp2p/vm-launcher:0.1.0
      env:
        - { name: VP2P_GPU_CLASS, value: "0380" }
        - { name: VP2P_VENDOR_ID, value: "0x10de" }
      securityContext:
        # VFIO pins the VM's memory: IPC_LOCK lifts the locked-memory limit,
        # as KubeVirt's virt-launcher is given it.
        capabilities:
          add: ["IPC_LOCK"]
      resources:
        claims: [{name: gpus}]
"#;

/// (host function, guest function, clique) of each `-device vfio-pci` line
/// `p2p-host plan --emit qemu` printed in the container.
fn planned(log: &str) -> Vec<(String, String, u8)> {
    log.lines()
        .filter_map(|l| {
            // The plan's own lines (QEMU's messages quote the device too).
            let dev = l.strip_prefix("-device ")?.split_whitespace().next()?;
            let prop = |k: &str| {
                dev.split(',')
                    .find_map(|p| p.strip_prefix(&format!("{k}=")).map(str::to_string))
            };
            let host = prop("host")?;
            let addr = prop("addr")?; // 0xSS.F on pcie.0
            let (slot, func) = addr.trim_start_matches("0x").split_once('.')?;
            let guest = format!("0000:00:{:0>2}.{func}", slot);
            Some((host, guest, prop("x-nv-gpudirect-clique")?.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_vm_in_a_pod_reads_the_cliques_the_plan_gave() {
    let _one = one_node_at_a_time();
    let t0 = Instant::now();
    let (cp, node) = boot_node("node-vm-in-pod", true);
    helm_install(&cp);
    let templates = std::fs::read_to_string(
        repo_root().join("host/kubernetes/dra/claim-templates-tiered.yaml"),
    )
    .unwrap();
    cp.apply(&templates).expect("the tiered templates apply");
    let created = Instant::now();
    cp.create(POD).expect("pod vm");
    let pod = poll(
        "the VM in pod vm powers off",
        Duration::from_secs(1500),
        || {
            let p = try_get(&cp, &["pod", "vm"])?;
            matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(p)
        },
        || {
            cp.try_kubectl(&["describe", "pod", "vm"])
                .unwrap_or_else(|e| e)
        },
    );
    let seconds = created.elapsed().as_secs_f64();
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    let log = node.container_log("default", "vm", uid, "vm");
    // The plan's lines and what the guest's init printed; the whole log
    // only when it failed.
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("-device") || l.starts_with("vp2p-vm") || l.contains("==VP2P"))
        .collect();
    eprintln!(
        "pod vm: {} {seconds:.1} s after creation\n{}",
        pod["status"]["phase"],
        said.join("\n")
    );
    assert_eq!(pod["status"]["phase"], "Succeeded", "{log}");

    let plan = planned(&log);
    assert_eq!(plan.len(), 2, "two devices planned: {log}");
    // Both stand-ins sit below one switch: one clique, from the node's tree.
    assert_eq!(plan[0].2, plan[1].2, "{plan:?}");
    let begin = log
        .find("==VP2P-PROBE-BEGIN==")
        .expect("the guest's probe began")
        + 20;
    let end = log
        .find("==VP2P-PROBE-END==")
        .expect("the guest's probe ended");
    let probe: Value = serde_json::from_str(&log[begin..end])
        .unwrap_or_else(|e| panic!("probe's JSON: {e}:\n{}", &log[begin..end]));
    let configs: BTreeMap<String, Vec<u8>> = log
        .lines()
        .filter_map(|l| {
            let rest = l.split("==VP2P-CONFIG ").nth(1)?;
            let mut words = rest.split_whitespace();
            let bdf = words.next()?.to_string();
            let bytes = words
                .map(|w| u8::from_str_radix(w, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            Some((bdf, bytes))
        })
        .collect();
    for (host, guest, clique) in &plan {
        let gpu = probe["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["bdf"] == guest.as_str())
            .unwrap_or_else(|| panic!("{host} as {guest} in the guest: {probe}"));
        assert_eq!(gpu["capability"]["state"], "present", "{guest}: {gpu}");
        assert_eq!(gpu["capability"]["clique"], *clique, "{guest}: {gpu}");
        let offset = usize::from_str_radix(
            gpu["capability"]["offset"]
                .as_str()
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        let config = &configs[guest];
        let want = P2pCapability::new(Clique::new(*clique).unwrap(), config[offset + 1]).encode();
        assert_eq!(
            &config[offset..offset + 8],
            &want,
            "{guest}'s capability, byte for byte"
        );
    }
    eprintln!(
        "vm in pod: node Ready {:.1} s, pod created to VM powered off {seconds:.1} s, whole test {:.1} s",
        node.boot_seconds,
        t0.elapsed().as_secs_f64()
    );
}
