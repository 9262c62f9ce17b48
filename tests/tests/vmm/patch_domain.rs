//! `p2p-host plan --patch-domain` on a domain as virt-manager leaves it
//! (libvirt's own formatting: single quotes, hostdevs on pcie-root-ports, no
//! aliases in the inactive XML), planned on the captured two-socket tree.
//!
//! Expectations from outside the patcher: the cliques are boot.sh's table at
//! PHB (gpu0-2 below host bridge pci0000:20 share one, gpu3 on pci0000:40 its
//! own, gpu4/5 on node 1 one more: 0,0,0/1/2,2), the guest port chain of each
//! GPU is boot.sh's layout (two below switch sw0, one on a root port of the
//! same host bridge, one on pxb1, two below sw1 on node 1), libvirt's schema
//! is `virt-xml-validate`, and the read-back uses roxmltree, not the patcher.

use p2p_tests::process::SpawnOwned;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use p2p_tests::libvirt::{validate, DomainView};
use p2p_tests::{binary, fixture_dir, plan_stdout, repo_root, run, two_socket_cliques, Run};

const TREE: &str = "qemu-11.1-two-socket-iommu-on";

fn domain_file() -> PathBuf {
    repo_root().join("tests/fixtures/domains/virt-manager-q35.xml")
}

fn patch(file: &str, extra: &[&str]) -> Run {
    let tree = fixture_dir(TREE);
    let mut args = vec![
        "plan",
        "--sysfs-root",
        tree.to_str().unwrap(),
        "--gpu-class",
        "0108",
        "--patch-domain",
        file,
    ];
    args.extend_from_slice(extra);
    run("p2p-host", &args)
}

fn patch_text(xml: &str, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("domain.xml");
    std::fs::write(&f, xml).unwrap();
    patch(f.to_str().unwrap(), extra)
}

fn ok(r: Run) -> String {
    assert_eq!(r.code, Some(0), "stderr:\n{}", r.stderr);
    r.stdout
}

fn original() -> String {
    std::fs::read_to_string(domain_file()).unwrap()
}

/// `patched` with the lines matching `added` dropped and line 1 as in
/// `original`: what must be left is the original, byte for byte.
fn without_added(patched: &str, added: impl Fn(&str) -> bool, original: &str) -> String {
    let mut out = String::new();
    let mut in_override = false;
    for (i, line) in patched.split_inclusive('\n').enumerate() {
        if i == 0 {
            out.push_str(original.split_inclusive('\n').next().unwrap());
            continue;
        }
        if line.trim() == "<qemu:override>" {
            in_override = true;
        }
        let skip = in_override || added(line);
        if line.trim() == "</qemu:override>" {
            in_override = false;
        }
        if !skip {
            out.push_str(line);
        }
    }
    out
}

#[test]
fn virt_manager_domain_gets_aliases_and_the_hand_derived_cliques() {
    let input = original();
    validate(&input).expect("control: the sample itself is a valid domain");
    let out = ok(patch(domain_file().to_str().unwrap(), &[]));
    validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let v = DomainView::parse(&out);
    let got: Vec<(String, u8)> = v.cliques().into_iter().collect();
    assert_eq!(got, two_socket_cliques());
    for (host, (alias, bus)) in &v.hostdevs {
        assert!(alias.starts_with("ua-"), "{host}: {alias}");
        assert!(
            bus.is_some(),
            "{host}: the flat patch keeps virt-manager's placement"
        );
    }
    assert!(out.starts_with(
        "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n"
    ));
    // Every other byte is the original's.
    let rest = without_added(&out, |l| l.contains("<alias name='ua-vp2p-gpu"), &input);
    assert_eq!(rest, input);
    // Idempotent.
    let again = patch_text(&out, &[]);
    assert!(
        again.stderr.contains("already patched, unchanged"),
        "{}",
        again.stderr
    );
    assert_eq!(ok(again), out);
}

#[test]
fn standard_input_is_read_with_a_dash() {
    let mut child = Command::new(binary("p2p-host"))
        .args(["plan", "--sysfs-root", fixture_dir(TREE).to_str().unwrap()])
        .args(["--gpu-class", "0108", "--patch-domain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(original().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        ok(patch(domain_file().to_str().unwrap(), &[]))
    );
}

#[test]
fn mirror_places_each_gpu_below_boot_sh_ports_and_inlines_the_nccl_file() {
    let input = original();
    let out = ok(patch(
        domain_file().to_str().unwrap(),
        &["--guest-topology", "mirror", "--nccl-topo-inline"],
    ));
    validate(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let v = DomainView::parse(&out);
    assert_eq!(
        v.cliques().into_iter().collect::<Vec<_>>(),
        two_socket_cliques()
    );
    let below_switch = vec![
        "pcie-switch-downstream-port".to_string(),
        "pcie-switch-upstream-port".into(),
        "pcie-root-port".into(),
        "pcie-expander-bus".into(),
    ];
    let on_root_port = vec!["pcie-root-port".to_string(), "pcie-expander-bus".into()];
    let chain = |b: &str| v.chain(b);
    assert_eq!(chain("0000:23:00.0"), (below_switch.clone(), Some(0)));
    assert_eq!(chain("0000:24:00.0"), (below_switch.clone(), Some(0)));
    assert_eq!(chain("0000:26:00.0"), (on_root_port.clone(), Some(0)));
    assert_eq!(chain("0000:41:00.0"), (on_root_port, Some(0)));
    assert_eq!(chain("0000:83:00.0"), (below_switch.clone(), Some(1)));
    assert_eq!(chain("0000:84:00.0"), (below_switch, Some(1)));
    // gpu0/1 share the switch; gpu2 shares their root complex; gpu3 has its own.
    let parent = |b: &str| v.controllers[&v.hostdevs[b].1.unwrap()].2;
    let up = |i: u32| v.controllers[&i].2.unwrap();
    let rc = |b: &str| {
        let mut i = v.hostdevs[b].1.unwrap();
        while v.controllers[&i].2 != Some(0) {
            i = v.controllers[&i].2.unwrap();
        }
        i
    };
    assert_eq!(parent("0000:23:00.0"), parent("0000:24:00.0"));
    assert_eq!(rc("0000:23:00.0"), rc("0000:26:00.0"));
    assert_ne!(rc("0000:23:00.0"), rc("0000:41:00.0"));
    assert_ne!(up(up(v.hostdevs["0000:83:00.0"].1.unwrap())), 0);
    // The new controllers are numbered after virt-manager's 14 root ports.
    assert_eq!(v.controllers.keys().filter(|i| **i >= 15).count(), 13);
    // The inline file is the one --emit nccl-topo writes for the same VM.
    let gpus: Vec<String> = two_socket_cliques().into_iter().map(|g| g.0).collect();
    let vm = format!("train-01={}", gpus.join(","));
    let emitted = plan_stdout(
        &fixture_dir(TREE),
        &[
            "--gpu-class",
            "0108",
            "--guest-topology",
            "mirror",
            "--vm",
            &vm,
            "--emit",
            "nccl-topo",
        ],
    );
    let (file, text) = &v.fw_cfg["opt/vp2p/nccl-topo.xml"];
    assert_eq!(file, &None);
    assert_eq!(text, &emitted);
    // Only the hostdevs' guest addresses were replaced; every other line of
    // the original is there, in order.
    let kept: Vec<&str> = input
        .lines()
        .filter(|l| !l.contains("<address type='pci' domain='0x0000' bus='0x0"))
        .collect();
    let mut it = out.lines();
    for l in &kept[1..] {
        assert!(it.any(|o| o == *l), "line lost or moved: {l}");
    }
    assert_eq!(
        ok(patch_text(
            &out,
            &["--guest-topology", "mirror", "--nccl-topo-inline"]
        )),
        out
    );
}

fn with_override(alias_of_23: &str, clique: u8) -> String {
    original()
        .replacen(
            "        <address domain='0x0000' bus='0x23' slot='0x00' function='0x0'/>\n      </source>\n",
            &format!("        <address domain='0x0000' bus='0x23' slot='0x00' function='0x0'/>\n      </source>\n      <alias name='{alias_of_23}'/>\n"),
            1,
        )
        .replace("<domain type='kvm'>", "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>")
        .replace(
            "</devices>\n",
            &format!("</devices>\n  <qemu:override>\n    <qemu:device alias='{alias_of_23}'>\n      <qemu:frontend>\n        <qemu:property name='x-nv-gpudirect-clique' type='unsigned' value='{clique}'/>\n      </qemu:frontend>\n    </qemu:device>\n  </qemu:override>\n"),
        )
}

#[test]
fn a_hand_set_clique_is_kept_when_it_agrees_and_refused_when_not() {
    let agrees = with_override("ua-gpu-a", 0);
    validate(&agrees).unwrap();
    let out = ok(patch_text(&agrees, &[]));
    let v = DomainView::parse(&out);
    assert_eq!(v.hostdevs["0000:23:00.0"].0, "ua-gpu-a");
    assert_eq!(v.cliques().len(), 6);
    // One override block, the hand-set device untouched, the others added to it.
    assert_eq!(out.matches("<qemu:override>").count(), 1);
    assert_eq!(out.matches("alias='ua-gpu-a'").count(), 1);
    validate(&out).unwrap();

    let r = patch_text(&with_override("ua-gpu-a", 5), &[]);
    assert_eq!(r.code, Some(1));
    assert!(r.stdout.is_empty());
    assert!(
        r.stderr.contains("0000:23:00.0 (alias ua-gpu-a): x-nv-gpudirect-clique=5 is set by hand in <qemu:override>, the plan gives 0"),
        "{}",
        r.stderr
    );

    // The same through -set on QEMU's command line.
    let cmdline = |v: u8| {
        original()
            .replacen("</source>\n", "</source>\n      <alias name='ua-gpu-a'/>\n", 1)
            .replace("<domain type='kvm'>", "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>")
            .replace("</devices>\n", &format!("</devices>\n  <qemu:commandline>\n    <qemu:arg value='-set'/>\n    <qemu:arg value='device.ua-gpu-a.x-nv-gpudirect-clique={v}'/>\n  </qemu:commandline>\n"))
    };
    let out = ok(patch_text(&cmdline(0), &[]));
    assert!(
        !out.contains("<qemu:device alias='ua-gpu-a'>"),
        "set once, on the command line"
    );
    let r = patch_text(&cmdline(2), &[]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("is set by hand in <qemu:commandline>"),
        "{}",
        r.stderr
    );
    let global = original()
        .replace("<domain type='kvm'>", "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>")
        .replace("</devices>\n", "</devices>\n  <qemu:commandline>\n    <qemu:arg value='-global'/>\n    <qemu:arg value='vfio-pci.x-nv-gpudirect-clique=1'/>\n  </qemu:commandline>\n");
    let r = patch_text(&global, &[]);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("'vfio-pci.x-nv-gpudirect-clique=1'"),
        "{}",
        r.stderr
    );
}

#[test]
fn bad_domains_are_refused_naming_the_place() {
    let r = patch_text(
        &original().replace("bus='0x84' slot", "bus='0x99' slot"),
        &[],
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr
            .contains("line 188: <hostdev> 0000:99:00.0 is not a PCI function in"),
        "{}",
        r.stderr
    );
    let r = patch_text("<domain><name>x</name>", &[]);
    assert!(
        r.stderr.contains("domain.xml: reading the domain") && r.stderr.contains("not XML"),
        "{}",
        r.stderr
    );
    let r = patch_text(
        &original().replace(
            "<cell id='1' cpus='8-15' memory='33554432' unit='KiB'/>\n",
            "",
        ),
        &["--guest-topology", "mirror"],
    );
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(
            "ua-vp2p-rc2 on guest NUMA cell 1 (host node 1), which the domain does not define"
        ),
        "{}",
        r.stderr
    );
    let r = patch(
        domain_file().to_str().unwrap(),
        &["--nccl-topo-path", "/var/lib/vp2p/{vm}.xml"],
    );
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("--guest-topology mirror"), "{}", r.stderr);
    let r = patch(domain_file().to_str().unwrap(), &["--emit", "qemu"]);
    assert_eq!(r.code, Some(2), "clap refuses the combination");
    // A domain without GPUs passes unchanged.
    let none = original()
        .replace("<hostdev ", "<hostdev_x ")
        .replace("</hostdev>", "</hostdev_x>");
    let r = patch_text(&none, &[]);
    assert_eq!(ok(r), none);
}

#[test]
fn a_file_entry_names_the_host_path() {
    let out = ok(patch(
        domain_file().to_str().unwrap(),
        &[
            "--guest-topology",
            "mirror",
            "--nccl-topo-path",
            "/var/lib/vp2p/{vm}.xml",
        ],
    ));
    validate(&out).unwrap();
    let v = DomainView::parse(&out);
    assert_eq!(
        v.fw_cfg["opt/vp2p/nccl-topo.xml"].0.as_deref(),
        Some("/var/lib/vp2p/train-01.xml")
    );
}
