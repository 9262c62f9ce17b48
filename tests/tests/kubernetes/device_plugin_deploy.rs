//! The device plugin's deployment (host/kubevirt/device-plugin.yaml and
//! permitted-host-devices.yaml): consistent with each other and with what
//! `p2p-host device-plugin` accepts.

use p2p_tests::process::SpawnOwned;
use std::process::{Command, Stdio};

use p2p_tests::{binary, fixture_dir};

/// host/kubevirt/: the DaemonSet runs the plugin with arguments it accepts,
/// mounts the kubelet's directory at the path it passes, and offers the
/// resource KubeVirt's permittedHostDevices entry names as external.
#[test]
fn daemonset_and_permitted_host_devices_agree() {
    let dir = p2p_tests::repo_root().join("host/kubevirt");
    let read = |name: &str| -> serde_yaml::Value {
        serde_yaml::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    let ds = read("device-plugin.yaml");
    assert_eq!(ds["kind"], "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["command"][0], "p2p-host");
    let args: Vec<String> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(args[0], "device-plugin");
    let value = |flag: &str| {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1].clone()
    };
    let kubelet_dir = value("--kubelet-dir");
    assert_eq!(kubelet_dir, "/var/lib/kubelet/device-plugins");
    assert_eq!(c["volumeMounts"][0]["mountPath"], kubelet_dir.as_str());
    assert_eq!(pod["volumes"][0]["hostPath"]["path"], kubelet_dir.as_str());

    let kv = read("permitted-host-devices.yaml");
    let entry = &kv["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0];
    assert_eq!(entry["resourceName"], value("--resource").as_str());
    assert_eq!(entry["pciVendorSelector"], value("--selector").as_str());
    assert_eq!(entry["externalResourceProvider"], true);

    // The arguments parse: the plugin starts (a tree without such GPUs,
    // a temporary kubelet directory) and says what it offers.
    let tmp = tempfile::tempdir().unwrap();
    let mut args = args.clone();
    let i = args.iter().position(|a| a == "--kubelet-dir").unwrap();
    args[i + 1] = tmp.path().to_str().unwrap().to_string();
    let tree = fixture_dir("qemu-11.1-nested-switch-iommu-on").join("sysfs");
    let mut child = Command::new(binary("p2p-host"))
        .args(&args)
        .arg("--sysfs-root")
        .arg(&tree)
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    let mut line = String::new();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    std::io::BufRead::read_line(&mut err, &mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        line,
        "device-plugin: vp2p.io/h100 offers 0 GPU(s) bound to vfio-pci: \n"
    );
}
