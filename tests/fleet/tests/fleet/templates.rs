//! The claim templates: the tuning candidates and the shipped tiered ones.

use p2p_tests::repo_root;
use serde_json::Value;

/// The tuning candidates of scripts/fleet-tune.sh read as their policy's
/// three templates (the names the fleet's pods ask for), each asking its
/// size's GPUs in every alternative.
#[test]
fn the_tuning_candidates_are_each_policys_three_templates() {
    use p2p_fleet::policy::{templates, Policy};
    let dir = repo_root().join("tests/fleet/templates");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let (policy, docs) = if name.starts_with("vp2p-") {
            (
                Policy::Vp2p,
                templates(Policy::Vp2p, &f, None, "t").unwrap(),
            )
        } else if name.starts_with("nvidia-") {
            let shipped = repo_root().join(p2p_fleet::policy::TIERED);
            (
                Policy::Nvidia,
                templates(Policy::Nvidia, &shipped, Some(&f), "t").unwrap(),
            )
        } else {
            panic!("{name}: a candidate is vp2p-*.yaml or nvidia-*.yaml");
        };
        let names: Vec<&str> = docs
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        let want: Vec<String> = [2, 4, 8].iter().map(|g| policy.template_name(*g)).collect();
        assert_eq!(names, want, "{name}");
        for (d, g) in docs.iter().zip([2, 4, 8]) {
            for alt in d["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
                .as_array()
                .unwrap()
            {
                assert_eq!(alt["count"], g, "{name}: {alt}");
            }
        }
        seen += 1;
    }
    assert!(seen >= 2, "a candidate for each policy");
}

/// The shipped tiered templates, as docs/kubevirt.md describes them: the
/// alternatives in order, each but `anywhere` held by its attribute, and in
/// the four-GPU template each PCIe level's constraint holding every nearer
/// level of both lists (written out by hand here).
#[test]
fn the_shipped_tiered_templates_hold_each_level_and_every_nearer_one() {
    let text = std::fs::read_to_string(
        repo_root().join("host/kubernetes/dra/claim-templates-tiered.yaml"),
    )
    .unwrap();
    let docs: Vec<Value> = p2p_tests::yaml_documents(&text)
        .into_iter()
        .map(|d| serde_json::to_value(d).unwrap())
        .collect();
    let names: Vec<&str> = docs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "two-peer-gpus-tiered",
            "four-peer-gpus-and-nic-tiered",
            "eight-peer-gpus-tiered"
        ]
    );
    let tiers = [
        "fm-partition",
        "nvlink",
        "switch",
        "switches",
        "root-complex",
        "numa-node",
        "anywhere",
    ];
    for (d, count) in docs.iter().zip([2, 4, 8]) {
        let gpus = &d["spec"]["spec"]["devices"]["requests"][0];
        let alts: Vec<&str> = gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        // Two GPUs ask first for a switch pair on GPUs without NVLink.
        let want: Vec<&str> = if count == 2 {
            ["switch-no-nvlink"].into_iter().chain(tiers).collect()
        } else {
            tiers.to_vec()
        };
        assert_eq!(alts, want);
        assert!(gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["count"] == count));
        // Plain NVLink only on GPUs Fabric Manager does not partition.
        let nvlink = gpus["firstAvailable"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == "nvlink")
            .unwrap();
        assert_eq!(
            nvlink["selectors"][0]["cel"]["expression"],
            format!("!has(device.attributes[\"gpu.vp2p.io\"].fmPartition{count})")
        );
    }
    let first = &docs[0]["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0];
    assert_eq!(
        first["selectors"][0]["cel"]["expression"],
        "!has(device.attributes[\"gpu.vp2p.io\"].nvlinkDomain)"
    );
    let c = |d: &Value| -> Vec<(Vec<String>, String)> {
        d["spec"]["spec"]["devices"]["constraints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let r = c["requests"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_str().unwrap().to_string())
                    .collect();
                (r, c["matchAttribute"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let a = |s: &str| format!("gpu.vp2p.io/{s}");
    let partition = |n: u8| (v(&["gpus/fm-partition"]), a(&format!("fmPartition{n}")));
    let levels = |n: u8| {
        vec![
            partition(n),
            (v(&["gpus/nvlink"]), a("nvlinkDomain")),
            (v(&["gpus/switch"]), a("cliquePix")),
            (v(&["gpus/switches"]), a("cliquePxb")),
            (v(&["gpus/root-complex"]), a("cliquePhb")),
            (v(&["gpus/numa-node"]), a("cliqueNode")),
        ]
    };
    let mut two = vec![(v(&["gpus/switch-no-nvlink"]), a("cliquePix"))];
    two.extend(levels(2));
    assert_eq!(c(&docs[0]), two);
    assert_eq!(c(&docs[2]), levels(8));
    assert_eq!(
        c(&docs[1]),
        vec![
            partition(4),
            (v(&["gpus/nvlink"]), a("nvlinkDomain")),
            (v(&["gpus/switch", "nic/switch"]), a("cliquePix")),
            (
                v(&["gpus/switch", "gpus/switches", "nic/switch", "nic/switches"]),
                a("cliquePxb")
            ),
            (
                v(&[
                    "gpus/switch",
                    "gpus/switches",
                    "gpus/root-complex",
                    "nic/switch",
                    "nic/switches",
                    "nic/root-complex"
                ]),
                a("cliquePhb")
            ),
            (
                v(&[
                    "gpus/fm-partition",
                    "gpus/nvlink",
                    "gpus/switch",
                    "gpus/switches",
                    "gpus/root-complex",
                    "gpus/numa-node",
                    "nic/switch",
                    "nic/switches",
                    "nic/root-complex",
                    "nic/numa-node"
                ]),
                a("cliqueNode")
            ),
        ]
    );
}
