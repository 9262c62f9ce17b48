//! The KubeVirt hook run as KubeVirt's sidecar-shim runs it: the wrapper
//! `host/kubevirt/onDefineDomain` found on PATH, called with exactly the
//! shim's argv (`--vmi JSON --domain XML`, cmd/sidecars/sidecar_shim.go), its
//! standard output taken as the new domain. The domain is written the way
//! virt-launcher marshals it (Go encoding/xml, tab indent, double quotes,
//! `<x></x>` pairs, GPU hostdevs aliased `ua-gpu-<name>`); the node's sysfs is
//! the captured two-socket tree. Cliques are boot.sh's table at PHB.

use std::process::Command;

use p2p_tests::kubevirt_case::{
    assert_mirrored, cliques, hand, schema_form, sidecar_domain, sidecar_vmi, TREE,
};
use p2p_tests::libvirt::{validate, DomainView};
use p2p_tests::{binary, fixture_dir, repo_root, Run};

/// The VMI of the shim's tests: vp2p's sidecar asked for, with dedicated
/// CPUs and guest NUMA passed through, and `annotations` added.
fn vmi(annotations: &[(&str, &str)]) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&sidecar_vmi(annotations)).unwrap();
    v["spec"]["domain"]["cpu"] = serde_json::json!(
        {"dedicatedCpuPlacement": true, "numa": {"guestMappingPassthrough": {}}});
    v.to_string()
}

/// Runs `onDefineDomain --vmi VMI --domain XML` the way the shim does.
fn hook(vmi: &str, domain: &str) -> Run {
    let wrapper_dir = repo_root().join("host/kubevirt");
    let bin_dir = binary("p2p-host").parent().unwrap().to_path_buf();
    let path = std::env::join_paths([wrapper_dir, bin_dir].into_iter().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("onDefineDomain")
        .env("PATH", &path)
        .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
        .args(["--vmi", vmi, "--domain", domain])
        .output()
        .expect("the wrapper runs from PATH");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn the_shim_gets_the_domain_with_cliques_and_nothing_else_changed() {
    let input = sidecar_domain();
    validate(&schema_form(&input)).expect("control: the sample in schema form is valid");
    let r = hook(&vmi(&[]), &input);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    validate(&schema_form(&out)).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(
        cliques(&out),
        hand(&[
            ("0000:23:00.0", 0),
            ("0000:24:00.0", 0),
            ("0000:41:00.0", 1),
            ("0000:83:00.0", 2)
        ])
    );
    // KubeVirt's own aliases are used; the only addition is the override
    // block before </domain>, in the domain's tabs and double quotes.
    let v = DomainView::parse(&out);
    assert_eq!(v.hostdevs["0000:41:00.0"].0, "ua-gpu-gpu3");
    let (head, tail) = out
        .split_once("\t<qemu:override>\n")
        .expect("override block");
    assert_eq!(format!("{head}</domain>"), input);
    assert!(
        tail.starts_with("\t\t<qemu:device alias=\"ua-gpu-gpu1\">\n\t\t\t<qemu:frontend>\n"),
        "{tail}"
    );
    assert!(!tail.contains('\''));
    assert!(
        r.stderr
            .contains("gpu-jobs_train-01: 4 GPU(s), 3 clique(s), max level PHB: 4 change(s)"),
        "{}",
        r.stderr
    );
    // virt-launcher may run the hook on its own output: nothing changes.
    let again = hook(&vmi(&[]), &out);
    assert_eq!(again.stdout, out);
    assert!(again.stderr.contains("already patched, unchanged"));
}

#[test]
fn annotations_set_the_level_and_the_mirrored_tree() {
    let r = hook(&vmi(&[("vp2p.io/max-level", "SYS")]), &sidecar_domain());
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(
        cliques(&r.stdout),
        hand(&[
            ("0000:23:00.0", 0),
            ("0000:24:00.0", 0),
            ("0000:41:00.0", 0),
            ("0000:83:00.0", 0)
        ])
    );
    let r = hook(
        &vmi(&[("vp2p.io/guest-topology", "mirror")]),
        &sidecar_domain(),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    // boot.sh: gpu0/1 below sw0 on node 0, gpu3 on pxb1's root port, gpu4
    // below sw1 on node 1; the NCCL file inline (no file in the compute
    // container needed).
    let v = assert_mirrored(&out);
    assert_eq!(v.chain("0000:24:00.0").0.len(), 4);
    let again = hook(&vmi(&[("vp2p.io/guest-topology", "mirror")]), &out);
    assert_eq!(again.stdout, out);
    // nccl-topo off: the same mirrored tree and cliques, without the file. The
    // error path also leaves no fw_cfg entry (it passes the domain unchanged,
    // exit 0), so the tree and the cliques are what prove the patch happened.
    let off = hook(
        &vmi(&[
            ("vp2p.io/guest-topology", "mirror"),
            ("vp2p.io/nccl-topo", "off"),
        ]),
        &sidecar_domain(),
    );
    assert_eq!(off.code, Some(0), "{}", off.stderr);
    assert!(!off.stderr.contains("unchanged"), "{}", off.stderr);
    validate(&schema_form(&off.stdout)).unwrap_or_else(|e| panic!("{e}\n{}", off.stdout));
    let w = DomainView::parse(&off.stdout);
    assert_eq!(
        w.chain("0000:41:00.0").0,
        vec!["pcie-root-port", "pcie-expander-bus"],
        "the mirrored tree"
    );
    assert_eq!(w.chain("0000:83:00.0").1, Some(1));
    // boot.sh's table at PHB, as without the annotations.
    assert_eq!(
        cliques(&off.stdout),
        hand(&[
            ("0000:23:00.0", 0),
            ("0000:24:00.0", 0),
            ("0000:41:00.0", 1),
            ("0000:83:00.0", 2)
        ])
    );
    assert!(w.fw_cfg.is_empty(), "{:?}", w.fw_cfg);
    assert!(!off.stdout.contains("fwcfg") && !off.stdout.contains("opt/vp2p"));
}

#[test]
fn an_error_passes_the_domain_unchanged_unless_the_vmi_asks_to_fail() {
    let no_numa: String = sidecar_domain()
        .lines()
        .filter(|l| !l.contains("<numa>") && !l.contains("</numa>") && !l.contains("<cell "))
        .collect::<Vec<_>>()
        .join("\n");
    let r = hook(&vmi(&[("vp2p.io/guest-topology", "mirror")]), &no_numa);
    assert_eq!(r.code, Some(0));
    assert_eq!(r.stdout, no_numa);
    assert!(
        r.stderr.contains("guest NUMA cell 0") && r.stderr.contains("passes unchanged"),
        "{}",
        r.stderr
    );

    let r = hook(
        &vmi(&[
            ("vp2p.io/guest-topology", "mirror"),
            ("vp2p.io/on-error", "fail"),
        ]),
        &no_numa,
    );
    assert_eq!(r.code, Some(1));
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains("vp2p.io/on-error is fail") && r.stderr.contains("guest NUMA cell 0"),
        "{}",
        r.stderr
    );

    let r = hook(&vmi(&[("vp2p.io/max-level", "rack")]), &sidecar_domain());
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (Some(0), sidecar_domain().as_str())
    );
    assert!(
        r.stderr.contains(
            "annotation vp2p.io/max-level: 'rack' is not one of pix | pxb | phb | node | sys"
        ),
        "{}",
        r.stderr
    );
    let r = hook(&vmi(&[("vp2p.io/maxlevel", "pix")]), &sidecar_domain());
    assert!(
        r.stderr
            .contains("annotation vp2p.io/maxlevel is not one vp2p reads"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, sidecar_domain());
    let r = hook("{not json", &sidecar_domain());
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (Some(0), sidecar_domain().as_str())
    );
    assert!(r.stderr.contains("--vmi is not JSON"));
}

#[test]
fn a_vmi_without_gpus_on_this_node_passes_unchanged() {
    let mut v: serde_json::Value = serde_json::from_str(&vmi(&[])).unwrap();
    v["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("vp2p.io/gpu-class");
    let r = hook(&v.to_string(), &sidecar_domain());
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (Some(0), sidecar_domain().as_str())
    );
    assert!(
        r.stderr.contains("no GPU among the domain's PCI hostdevs"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_container_layout_names_the_wrapper_where_the_shim_looks() {
    // The shim looks `onDefineDomain` up on PATH; the image puts it in /usr/bin.
    let cf = std::fs::read_to_string(repo_root().join("host/kubevirt/Containerfile")).unwrap();
    assert!(cf.contains("COPY onDefineDomain /usr/bin/onDefineDomain"));
    assert!(cf.contains("FROM ${SHIM} AS shim") && cf.contains("quay.io/kubevirt/sidecar-shim:"));
    // p2p-host comes from its package (README "Install"), the entry point is the shim's.
    assert!(cf.contains("RUN dpkg -i /tmp/p2p-host_*_amd64.deb"));
    assert!(cf.contains("COPY --from=shim /sidecar-shim /sidecar-shim"));
    assert!(cf.contains("ENTRYPOINT [\"/sidecar-shim\"]"));
    let wrapper = repo_root().join("host/kubevirt/onDefineDomain");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&wrapper).unwrap().permissions(),
    );
    assert_eq!(mode & 0o111, 0o111, "executable");
}
