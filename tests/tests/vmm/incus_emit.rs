//! `plan --emit incus` and `--emit incus-yaml` on the captured two-socket tree.
//! Expectations: boot.sh's cliques at PHB, Incus's device syntax
//! (`incus config device add VM NAME gpu gputype=physical pci=BDF`, `pci`
//! devices with `address=`), the key `nvidia.clique` of the API extension
//! gpu_physical_clique with values 0-15 (QEMU's range for the property Incus
//! sets), and YAML that parses with string values, as Incus stores them.

use std::collections::BTreeMap;

use p2p_tests::{fixture_dir, plan_stdout, run, two_socket_cliques};

const TREE: &str = "qemu-11.1-two-socket-iommu-on";
const GPUS: &str = "0000:23:00.0,0000:24:00.0,0000:26:00.0,0000:41:00.0,0000:83:00.0,0000:84:00.0";

fn emit(format: &str) -> String {
    plan_stdout(
        &fixture_dir(TREE),
        &[
            "--gpu-class",
            "0108",
            "--vm",
            &format!("train-01={GPUS}"),
            "--emit",
            format,
        ],
    )
}

#[test]
fn commands_add_each_gpu_with_the_hand_derived_clique() {
    let out = emit("incus");
    let adds: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("incus config device add"))
        .collect();
    let want = two_socket_cliques();
    assert_eq!(adds.len(), want.len(), "{out}");
    for (i, (line, (bdf, clique))) in adds.iter().zip(&want).enumerate() {
        assert_eq!(
            *line,
            format!("incus config device add train-01 vp2p-gpu{i} gpu gputype=physical pci={bdf} nvidia.clique={clique}")
        );
    }
    // The fallback for Incus without the extension sets the property in the
    // device section Incus names dev-incus_<device>.
    assert!(
        out.contains("[device \"dev-incus_vp2p-gpu3\"]\n# x-nv-gpudirect-clique = \"1\""),
        "{out}"
    );
}

#[test]
fn yaml_parses_with_string_values_in_range() {
    let out = emit("incus-yaml");
    let doc: serde_yaml::Value = serde_yaml::from_str(&out).expect("YAML");
    let devices: BTreeMap<String, BTreeMap<String, serde_yaml::Value>> =
        serde_yaml::from_value(doc["devices"].clone()).unwrap();
    assert_eq!(devices.len(), 6);
    let gpu4 = &devices["vp2p-gpu4"];
    assert_eq!(gpu4["type"], "gpu");
    assert_eq!(gpu4["gputype"], "physical");
    assert_eq!(gpu4["pci"], "0000:83:00.0");
    assert_eq!(gpu4["nvidia.clique"], "2");
    for (name, d) in &devices {
        let c: u8 = d["nvidia.clique"].as_str().unwrap().parse().unwrap();
        assert!(c <= 15, "{name}: {c}");
    }
}

#[test]
fn incus_has_no_mirrored_tree() {
    let r = run(
        "p2p-host",
        &[
            "plan",
            "--sysfs-root",
            fixture_dir(TREE).to_str().unwrap(),
            "--gpu-class",
            "0108",
            "--guest-topology",
            "mirror",
            "--emit",
            "incus",
        ],
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("Incus lays out the guest's PCIe ports itself"),
        "{}",
        r.stderr
    );
}
