//! vp2p's plugin hook deployment (host/kubevirt/plugin-hook.yaml): the
//! `Plugin` object, the `MutatingAdmissionPolicy` that injects the sidecar
//! and its binding agree with each other, with what KubeVirt 1.9.0 requires
//! of a plugin socket (its `kubevirt-plugin-socket-path-policy` and
//! `kubevirt-plugin-sidecar-subpath-policy`, virt-launcher's own check), and
//! with what `p2p-host kubevirt plugin-hook` accepts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use p2p_host::kubevirt_plugin::api::PLUGIN_SOCKET_DIR;
use p2p_host::kubevirt_plugin::{DEFAULT_SOCKET, PLUGIN_NAME};
use p2p_tests::{binary, fixture_dir, repo_root};

/// The YAML documents of host/kubevirt/plugin-hook.yaml by kind.
fn manifests() -> std::collections::BTreeMap<String, serde_yaml::Value> {
    let text = std::fs::read_to_string(repo_root().join("host/kubevirt/plugin-hook.yaml")).unwrap();
    text.split("\n---\n")
        .map(|d| {
            let v: serde_yaml::Value = serde_yaml::from_str(d).unwrap();
            (v["kind"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

/// The quoted strings in the CEL list that follows `key: [` in `cel`.
fn cel_list(cel: &str, key: &str) -> Vec<String> {
    let start = cel.find(&format!("{key}: [")).unwrap() + key.len() + 3;
    let end = start + cel[start..].find(']').unwrap();
    cel[start..end]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .collect()
}

#[test]
fn the_plugin_and_the_admission_policy_agree_with_the_hook() {
    let m = manifests();
    let plugin = &m["Plugin"];
    assert_eq!(plugin["apiVersion"], "plugin.kubevirt.io/v1alpha1");
    assert_eq!(plugin["metadata"]["name"], PLUGIN_NAME);
    let socket = plugin["spec"]["domainHooks"][0]["sidecar"]["socketPath"]
        .as_str()
        .unwrap();
    assert_eq!(socket, DEFAULT_SOCKET);
    // KubeVirt's kubevirt-plugin-socket-path-policy, and virt-launcher's own check.
    assert!(socket.starts_with(&format!("{PLUGIN_SOCKET_DIR}/{PLUGIN_NAME}/")));
    assert!(socket.ends_with(".sock") && socket.len() <= 108);
    assert_eq!(plugin["spec"]["failureStrategy"], "Fail");
    let map = &m["MutatingAdmissionPolicy"];
    assert_eq!(map["apiVersion"], "admissionregistration.k8s.io/v1");
    let map_name = map["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        plugin["spec"]["mutatingAdmissionPolicies"][0]["name"],
        map_name
    );
    let binding = &m["MutatingAdmissionPolicyBinding"];
    assert_eq!(binding["spec"]["policyName"], map_name);
    // The Plugin's condition and the policy's selection are the same test.
    let selects = "annotations.exists(k, k.startsWith(\"vp2p.io/\"))";
    assert!(plugin["spec"]["condition"]
        .as_str()
        .unwrap()
        .contains(selects));
    let conditions = map["spec"]["matchConditions"].as_sequence().unwrap();
    assert!(conditions
        .iter()
        .any(|c| c["expression"].as_str().unwrap().contains(selects)));

    let cel = map["spec"]["mutations"][0]["jsonPatch"]["expression"]
        .as_str()
        .unwrap();
    // The socket's directory is the pod's plugin volume, subPath the plugin.
    assert!(cel.contains("name: \"kubevirt-plugin-sockets\""));
    assert!(cel.contains(&format!(
        "mountPath: \"{PLUGIN_SOCKET_DIR}/{PLUGIN_NAME}/\""
    )));
    assert!(cel.contains(&format!("subPath: \"{PLUGIN_NAME}\"")));
    assert_eq!(cel_list(cel, "command"), ["p2p-host"]);
    let args = cel_list(cel, "args");
    assert_eq!(
        args,
        ["kubevirt", "plugin-hook", "--socket", DEFAULT_SOCKET]
    );
    // The image's user is numeric (runAsNonRoot) and p2p-host is on its PATH.
    let cf = std::fs::read_to_string(repo_root().join("host/kubevirt/Containerfile")).unwrap();
    assert!(cf.contains("\nUSER 107\n") && cf.contains("RUN dpkg -i /tmp/p2p-host_*_amd64.deb"));

    // The arguments start the hook (the socket moved into a temporary
    // directory): it serves there and stops on SIGTERM, removing the socket.
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join(PLUGIN_NAME).join("hook.sock");
    let mut child = Command::new(binary("p2p-host"))
        .args(&args[..3])
        .arg(&sock)
        .env(
            "VP2P_SYSFS_ROOT",
            fixture_dir("qemu-11.1-two-socket-iommu-on"),
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim_end(),
        format!(
            "p2p-host kubevirt plugin-hook: serving DomainHookService.MutateDomain on {}",
            sock.display()
        )
    );
    assert!(sock.exists());
    // The reader of its standard error is gone (dropped above): the hook
    // still stops cleanly, as a server must whose log reader went away.
    // SAFETY: kill(2) on the pid of a child we have not waited for yet.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!sock.exists());
}
