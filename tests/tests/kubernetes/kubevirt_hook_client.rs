//! vp2p's KubeVirt hooks called by KubeVirt v1.9.0's own client code, not a
//! stand-in: `kubevirt-hook-client` (tests/kubevirt, Go, built against
//! kubevirt.io/kubevirt v1.9.0) runs virt-launcher's plugin pipeline
//! (`plugins.ApplyDomainHooks`, pkg/virt-launcher/virtwrap/plugins/) against
//! `p2p-host kubevirt plugin-hook`, and virt-launcher's hook manager
//! (`hooks.Manager`, pkg/hooks/manager.go) against KubeVirt's own
//! sidecar-shim (cmd/sidecars) running host/kubevirt/onDefineDomain. It reads
//! the domain into virt-launcher's DomainSpec and the VMI into KubeVirt's
//! type, and reports the domain the hook got ("sent"), the one virt-launcher
//! would define ("defined"), the DomainSpec virt-launcher keeps for its next
//! define ("spec") and the error virt-launcher would see. KubeVirt's client
//! insists on its fixed paths (/var/run/kubevirt-plugin/<plugin>/,
//! /var/run/kubevirt-hooks/); the client binds the test's sockets there in a
//! mount namespace of its own (root, or unprivileged user namespaces).
//!
//! Same inputs and expectations as kubevirt_plugin_hook.rs (the plugin) and
//! kubevirt_hook.rs (the sidecar): the captured two-socket tree, whose
//! "GPUs" are NVMe functions; at PHB boot.sh's cliques, 23:00.0 and 24:00.0
//! clique 0, 41:00.0 clique 1, 83:00.0 clique 2.

use p2p_tests::process::{SpawnOwned, Spawned};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_tests::kubevirt_case::{
    assert_mirrored, boot_sh_cliques, cliques, on_define_domain, plugin_domain, schema_form,
    sidecar_domain, sidecar_vmi, vmi, HookProcess, TREE,
};
use p2p_tests::kubevirt_client::kubevirt_hook_client;
use p2p_tests::libvirt::{validate, DomainView};
use p2p_tests::{binary, fixture_dir, repo_root};

/// The `<metadata>` virt-launcher's DomainSpec always writes (empty here:
/// the domain was read from a file, not made by virt-launcher's converter).
const METADATA: &str =
    "  <metadata><kubevirt xmlns=\"http://kubevirt.io\"><uid></uid></kubevirt></metadata>\n";

/// The domains seen by the cliques, controllers and fw_cfg entries.
fn same_devices(a: &str, b: &str) {
    let (a, b) = (DomainView::parse(a), DomainView::parse(b));
    assert_eq!(a.hostdevs, b.hostdevs);
    assert_eq!(a.controllers, b.controllers);
    assert_eq!(a.properties, b.properties);
    assert_eq!(a.fw_cfg, b.fw_cfg);
}

/// One call through KubeVirt's client: what it printed.
#[derive(Debug)]
struct Call {
    code: Option<i32>,
    sent: String,
    defined: String,
    spec: String,
    error: String,
    stderr: String,
    /// With `--again` (plugin): the second define, from the DomainSpec
    /// virt-launcher kept in memory.
    again: Option<Box<Call>>,
}

impl Call {
    fn read(j: &serde_json::Value, code: Option<i32>, stderr: &str) -> Call {
        let s = |k: &str| j[k].as_str().unwrap().to_string();
        Call {
            code,
            sent: s("sent"),
            defined: s("defined"),
            spec: s("spec"),
            error: s("error"),
            stderr: stderr.to_string(),
            again: j
                .get("again")
                .map(|a| Box::new(Call::read(a, code, stderr))),
        }
    }
}

fn client(dir: &Path, mode: &str, socket: &Path, domain: &str, vmi: &str, extra: &[&str]) -> Call {
    let files = tempfile::tempdir_in(dir).unwrap();
    let (d, v) = (
        files.path().join("domain.xml"),
        files.path().join("vmi.json"),
    );
    std::fs::write(&d, domain).unwrap();
    std::fs::write(&v, vmi).unwrap();
    let out = Command::new(kubevirt_hook_client())
        .arg(mode)
        .arg("--socket")
        .arg(socket)
        .arg("--domain")
        .arg(&d)
        .arg("--vmi")
        .arg(&v)
        .args(extra)
        .output()
        .expect("kubevirt-hook-client runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("kubevirt-hook-client printed no JSON ({e}):\n{stderr}"));
    Call::read(&j, out.status.code(), &stderr)
}

/// MutateDomain through virt-launcher's plugin pipeline on `hook`.
fn plugin(hook: &HookProcess, domain: &str, vmi: &str, extra: &[&str]) -> Call {
    let dir = hook
        .socket
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap();
    client(dir, "plugin", &hook.socket, domain, vmi, extra)
}

/// A Plugin manifest in `dir` (the fields of host/kubevirt/plugin-hook.yaml's).
fn manifest(dir: &Path, condition: Option<&str>, failure: &str) -> String {
    let p = dir.join(format!("plugin-{failure}.yaml"));
    let cond = condition
        .map(|c| format!("  condition: '{c}'\n"))
        .unwrap_or_default();
    std::fs::write(
        &p,
        format!(
            "apiVersion: plugin.kubevirt.io/v1alpha1\nkind: Plugin\nmetadata:\n  name: vp2p\n\
             spec:\n{cond}  failureStrategy: {failure}\n  domainHooks:\n    - sidecar:\n        \
             socketPath: /var/run/kubevirt-plugin/vp2p/hook.sock\n      timeout: 30s\n"
        ),
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn boot_through_virt_launchers_plugin_pipeline_defines_the_cliques() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let input = plugin_domain();
    let c = plugin(&hook, &input, &vmi(&[]), &[]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    // The hook got the fixture: it is what 1.9.0's pipeline sends, but for
    // the <metadata> virt-launcher always writes.
    assert_eq!(c.sent.replacen(METADATA, "", 1), input);

    let out = &c.defined;
    validate(&schema_form(out)).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(cliques(out), boot_sh_cliques());
    let v = DomainView::parse(out);
    assert_eq!(v.hostdevs["0000:41:00.0"].0, "ua-gpu-gpu3");
    assert_eq!(
        v.properties[&(
            "ua-gpu-gpu3".to_string(),
            "x-nv-gpudirect-clique".to_string()
        )],
        "1"
    );
    // Nothing else: virt-launcher defines the domain it sent with the
    // override block before </domain> (libvirtxml writes it in a default
    // namespace, not with vp2p's qemu: prefix) ...
    let (head, tail) = out
        .split_once("  <override xmlns=\"http://libvirt.org/schemas/domain/qemu/1.0\">\n")
        .expect("override block");
    assert_eq!(format!("{head}</domain>"), c.sent);
    assert!(tail.ends_with("  </override>\n</domain>"), "{tail}");
    // ... with the devices the sidecar path gives the same domain.
    same_devices(out, &on_define_domain(&vmi(&[]), &c.sent));

    // virt-launcher keeps a DomainSpec without the override (KubeVirt's
    // DomainSpec has no field for it) and defines again from it (q35
    // hotplug ports): the hook runs again and the same domain is defined.
    assert!(!c.spec.contains("override"), "{}", c.spec);
    let again = plugin(&hook, &c.spec, &vmi(&[]), &[]);
    assert_eq!(again.error, "");
    assert_eq!(again.defined, c.defined);

    let (code, log) = hook.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains("gpu-jobs/train-01: gpu-jobs_train-01: 4 GPU(s), 3 clique(s), max level PHB: 5 change(s)")
            && log.contains("gpu-jobs/train-01:   declared xmlns:qemu"),
        "{log}"
    );
}

#[test]
fn the_mirrored_tree_and_the_nccl_file_come_through_the_pipeline() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let input = plugin_domain();
    let mirror = vmi(&[("vp2p.io/guest-topology", "mirror")]);
    let c = plugin(&hook, &input, &mirror, &[]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    let m = &c.defined;
    let w = assert_mirrored(m);
    assert_eq!(cliques(m), boot_sh_cliques());
    same_devices(m, &on_define_domain(&mirror, &c.sent));
    // The NCCL file is on the QEMU command line (`-fw_cfg`, the option
    // libvirt makes of a fw_cfg <sysinfo>), and the SMBIOS <sysinfo> is the
    // domain's only one, as sent.
    assert!(!m.contains("fwcfg"), "{m}");
    assert_eq!(smbios(m), smbios(&input));
    assert!(!smbios(&input).is_empty());

    // virt-launcher keeps a DomainSpec with one <sysinfo> (a second, fw_cfg
    // one would be merged into the SMBIOS one): it keeps the SMBIOS one
    // whole, and the NCCL file in its QEMUCmd (transferQEMUCommandline) ...
    assert_eq!(c.spec.matches("<sysinfo").count(), 1, "{}", c.spec);
    assert_eq!(smbios(&c.spec), smbios(&input));
    assert!(c
        .spec
        .contains("<qemu:arg value=\"name=opt/vp2p/nccl-topo.xml,string="));
    // ... and a define from it (q35 hotplug ports, --again) hands the hook
    // the NCCL file, which it keeps, and gets the cliques, the mirrored tree,
    // the NCCL file and the SMBIOS sysinfo again, the same domain.
    let c = plugin(&hook, &input, &mirror, &["--again"]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    let again = c.again.unwrap();
    assert_eq!(DomainView::parse(&again.sent).fw_cfg, w.fw_cfg);
    assert_eq!(again.defined, c.defined);
    let a = DomainView::parse(&again.defined);
    assert_eq!((a.controllers, a.fw_cfg), (w.controllers, w.fw_cfg));
    assert_eq!(cliques(&again.defined), boot_sh_cliques());
    assert_eq!(smbios(&again.defined), smbios(&input));
    assert_eq!(again.spec, c.spec);
    let (_, log) = hook.stop();
    assert_eq!(
        log.matches("fw_cfg opt/vp2p/nccl-topo.xml: added").count(),
        2,
        "once a boot, not on the define from the kept spec:\n{log}"
    );
}

/// The SMBIOS `<sysinfo>` entries: (block, name, value), in order.
fn smbios(xml: &str) -> Vec<(String, String, String)> {
    let doc = roxmltree::Document::parse(xml).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("sysinfo") && n.attribute("type") == Some("smbios"))
        .flat_map(|s| s.descendants().filter(|e| e.has_tag_name("entry")))
        .map(|e| {
            (
                e.parent().unwrap().tag_name().name().to_string(),
                e.attribute("name").unwrap_or_default().to_string(),
                e.text().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn planning_errors_reach_virt_launcher_as_the_plugin_and_the_vmi_ask() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let input = plugin_domain();
    let fail = vmi(&[("vp2p.io/max-level", "rack"), ("vp2p.io/on-error", "fail")]);

    // on-error fail with failureStrategy Fail: the define fails with the reason.
    let c = plugin(&hook, &input, &fail, &[]);
    assert_eq!(c.code, Some(2), "{}", c.stderr);
    assert_eq!(
        c.error,
        "plugin vp2p hook 0 failed: MutateDomain RPC to vp2p failed with FailedPrecondition: \
         vp2p.io/on-error is fail: the VM is not defined: annotation vp2p.io/max-level: \
         'rack' is not one of pix | pxb | phb | node | sys (default phb)"
    );
    assert_eq!(c.defined, "");
    // With failureStrategy Ignore virt-launcher defines the domain unpatched.
    let ignore = manifest(tmp.path(), None, "Ignore");
    let c = plugin(&hook, &input, &fail, &["--plugin", &ignore]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    assert_eq!(c.defined, c.sent);
    // Without on-error fail: unchanged, no error.
    let c = plugin(&hook, &input, &vmi(&[("vp2p.io/max-level", "rack")]), &[]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    assert_eq!(c.defined, c.sent);

    // A migration target's domain passes unchanged, whatever the VMI says.
    for v in [vmi(&[]), fail] {
        let c = plugin(&hook, &input, &v, &["--context", "MigrationTarget"]);
        assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
        assert_eq!(c.defined, c.sent);
    }
    let (code, log) = hook.stop();
    assert_eq!(code, Some(0));
    assert!(
        log.contains("MigrationTarget: the domain passes unchanged"),
        "{log}"
    );
}

/// The Plugin's condition in KubeVirt 1.9.0's domain-hook CEL (Go field
/// names: `vmi.Annotations`, as KubeVirt's own tests write `vmi.Labels`):
/// a VMI with a vp2p.io/ annotation gets the hook, one without is not sent
/// to it.
#[test]
fn a_condition_in_kubevirts_domain_hook_cel_selects_the_vmis() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let input = plugin_domain();
    let p = manifest(
        tmp.path(),
        Some("vmi.Annotations.exists(k, k.startsWith(\"vp2p.io/\"))"),
        "Fail",
    );
    let c = plugin(&hook, &input, &vmi(&[]), &["--plugin", &p]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    assert_eq!(cliques(&c.defined), boot_sh_cliques());
    let (_, log) = hook.stop();
    assert!(log.contains("4 GPU(s), 3 clique(s)"), "{log}");

    let hook = HookProcess::plugin_hook_in(tmp.path());
    let none: serde_json::Value = {
        let mut v: serde_json::Value = serde_json::from_str(&vmi(&[])).unwrap();
        v["metadata"]["annotations"] =
            serde_json::json!({"kubevirt.io/latest-observed-api-version": "v1"});
        v
    };
    let c = plugin(&hook, &input, &none.to_string(), &["--plugin", &p]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    assert_eq!(c.defined, c.sent);
    let (_, log) = hook.stop();
    assert!(!log.contains("train-01"), "the hook was called:\n{log}");
}

/// host/kubevirt/plugin-hook.yaml's Plugin as written, its condition in
/// KubeVirt 1.9.0's domain-hook CEL (pkg/virt-launcher/virtwrap/plugins/cel,
/// `ext.NativeTypes` without json tags: Go field names; virt-api's Plugin
/// admission compiles it with the same evaluator). A condition with JSON
/// names (`vmi.metadata.annotations`, the manifest's before) failed every
/// define there ("undefined field 'metadata'"). A VMI with a vp2p.io/
/// annotation gets the hook; the VMIs kubevirt_plugin_deploy.rs expects the
/// condition to leave out are not sent to it (a VMI without annotations
/// included: its nil map reads as empty).
#[test]
fn the_manifests_plugin_selects_a_vp2p_vmi() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let p = repo_root().join("host/kubevirt/plugin-hook.yaml");
    let p = p.to_str().unwrap();
    let input = plugin_domain();
    let c = plugin(&hook, &input, &vmi(&[]), &["--plugin", p]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    assert_eq!(cliques(&c.defined), boot_sh_cliques());

    let with = |name: &str, annotations: Option<serde_json::Value>| {
        let mut v: serde_json::Value = serde_json::from_str(&vmi(&[])).unwrap();
        v["metadata"]["name"] = name.into();
        let meta = v["metadata"].as_object_mut().unwrap();
        match annotations {
            Some(a) => meta.insert("annotations".into(), a),
            None => meta.remove("annotations"),
        };
        v.to_string()
    };
    let only_level = with(
        "only-level",
        Some(serde_json::json!({"vp2p.io/max-level": "phb"})),
    );
    let c = plugin(&hook, &input, &only_level, &["--plugin", p]);
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    let left_out = [
        ("plain", None),
        ("empty", Some(serde_json::json!({}))),
        (
            "other",
            Some(serde_json::json!({"kubevirt.io/latest-observed-api-version": "v1"})),
        ),
        (
            "prefix-only",
            Some(serde_json::json!({"example.com/vp2p.io/on-error": "fail"})),
        ),
        ("no-slash", Some(serde_json::json!({"vp2p.io": "yes"}))),
    ];
    for (name, annotations) in left_out.iter().cloned() {
        let c = plugin(&hook, &input, &with(name, annotations), &["--plugin", p]);
        assert_eq!(
            (c.code, c.error.as_str()),
            (Some(0), ""),
            "{name}: {}",
            c.stderr
        );
        assert_eq!(c.defined, c.sent, "{name}");
    }
    let (_, log) = hook.stop();
    assert!(
        log.contains("gpu-jobs/train-01: gpu-jobs_train-01: 4 GPU(s)"),
        "{log}"
    );
    assert!(log.contains("gpu-jobs/only-level: "), "{log}");
    for (name, _) in left_out {
        assert!(
            !log.contains(&format!("gpu-jobs/{name}:")),
            "{name} was sent:\n{log}"
        );
    }
}

/// KubeVirt's sidecar-shim (cmd/sidecars) with host/kubevirt/onDefineDomain
/// on its PATH, listening in `dir` (its /var/run/kubevirt-hooks).
struct Shim {
    child: Spawned,
    socket: PathBuf,
}

impl Drop for Shim {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child we have not waited for yet;
        // the client passes SIGTERM on to the shim (its parent-death signal).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

fn shim(dir: &Path) -> Shim {
    std::fs::create_dir_all(dir).unwrap();
    let client = kubevirt_hook_client();
    let shim = client.with_file_name("sidecar-shim");
    let path = std::env::join_paths(
        [
            repo_root().join("host/kubevirt"),
            binary("p2p-host").parent().unwrap().to_path_buf(),
        ]
        .into_iter()
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        )),
    )
    .unwrap();
    let mut s = Shim {
        child: Command::new(&client)
            .arg("shim")
            .arg("--dir")
            .arg(dir)
            .arg("--")
            .arg(&shim)
            .args(["--version", "v1alpha3"])
            .env("PATH", path)
            .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_owned()
            .unwrap(),
        socket: PathBuf::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sock = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "sock"));
        if let Some(socket) = sock {
            s.socket = socket;
            return s;
        }
        assert!(Instant::now() < deadline, "no shim socket within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// onDefineDomain through virt-launcher's hook manager and the shim `s`.
fn sidecar(s: &Shim, domain: &str, vmi: &str) -> Call {
    // The client's files go next to the hooks directory, not in it.
    let dir = s.socket.parent().and_then(Path::parent).unwrap();
    client(dir, "sidecar", &s.socket, domain, vmi, &[])
}

#[test]
fn the_sidecar_through_kubevirts_shim_and_hook_manager() {
    let tmp = tempfile::tempdir().unwrap();
    let s = shim(&tmp.path().join("hooks"));
    let c = sidecar(&s, &sidecar_domain(), &sidecar_vmi(&[]));
    assert_eq!((c.code, c.error.as_str()), (Some(0), ""), "{}", c.stderr);
    // The hook manager sends Go's tab-indented DomainSpec with xmlns:qemu
    // (virt-launcher's defaults declare it); the shim's answer is what
    // onDefineDomain prints for it, and virt-launcher defines exactly that.
    assert!(c.sent.starts_with(
        "<domain type=\"kvm\" xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\">\n\t<name>"
    ));
    assert_eq!(c.defined, on_define_domain(&sidecar_vmi(&[]), &c.sent));
    let out = &c.defined;
    validate(&schema_form(out)).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(cliques(out), boot_sh_cliques());
    assert_eq!(
        DomainView::parse(out).hostdevs["0000:41:00.0"].0,
        "ua-gpu-gpu3"
    );
}

/// virt-launcher reads the sidecar's answer back into its DomainSpec
/// (util.ApplySidecarHooks), which loses xmlns:qemu (encoding/xml does not
/// fill DomainSpec.XmlNS), and defines again from it on q35 (hotplug ports).
/// The hook then gets a tab-indented domain without xmlns:qemu and declares
/// the namespace: with its separating space (vp2p once wrote
/// `<domain type="kvm"xmlns:qemu=`, restyling the snippet's leading space
/// away in a domain not indented by two spaces), so the answer is XML and
/// virt-launcher reads it.
#[test]
fn a_second_define_from_the_kept_spec_is_xml() {
    let tmp = tempfile::tempdir().unwrap();
    let s = shim(&tmp.path().join("hooks"));
    let first = sidecar(&s, &sidecar_domain(), &sidecar_vmi(&[]));
    assert_eq!(first.error, "");
    let again = sidecar(&s, &first.spec, &sidecar_vmi(&[]));
    assert_eq!(again.error, "");
    assert!(again.sent.starts_with("<domain type=\"kvm\">\n\t<name>"));
    assert!(again.defined.starts_with(
        "<domain type=\"kvm\" xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\">\n\t<name>"
    ));
    roxmltree::Document::parse(&again.defined)
        .unwrap_or_else(|e| panic!("{e}\n{}", &again.defined[..200]));
    assert_eq!(cliques(&again.defined), boot_sh_cliques());
    same_devices(&again.defined, &first.defined);
}

/// The mirrored tree with the NCCL file through the sidecar path: the file
/// on the QEMU command line, the SMBIOS <sysinfo> kept whole in the
/// DomainSpec virt-launcher keeps (one <sysinfo>), which loses the command
/// line (encoding/xml reads no <qemu:commandline> into a DomainSpec), and a
/// define from that spec gets the file again from the hook.
#[test]
fn the_sidecar_path_keeps_the_smbios_sysinfo_and_the_nccl_file() {
    let tmp = tempfile::tempdir().unwrap();
    let s = shim(&tmp.path().join("hooks"));
    let input = sidecar_domain();
    let mirror = sidecar_vmi(&[("vp2p.io/guest-topology", "mirror")]);
    let first = sidecar(&s, &input, &mirror);
    assert_eq!(
        (first.code, first.error.as_str()),
        (Some(0), ""),
        "{}",
        first.stderr
    );
    let out = &first.defined;
    validate(&schema_form(out)).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(cliques(out), boot_sh_cliques());
    let w = DomainView::parse(out);
    let (file, text) = &w.fw_cfg["opt/vp2p/nccl-topo.xml"];
    assert!(file.is_none() && text.starts_with("<system version=\"1\">"));
    assert!(!out.contains("fwcfg"), "{out}");
    assert!(!smbios(&input).is_empty());
    assert_eq!(smbios(out), smbios(&input));
    assert_eq!(first.spec.matches("<sysinfo").count(), 1, "{}", first.spec);
    assert_eq!(smbios(&first.spec), smbios(&input));
    assert!(!first.spec.contains("commandline"), "{}", first.spec);

    let again = sidecar(&s, &first.spec, &mirror);
    assert_eq!(
        (again.code, again.error.as_str()),
        (Some(0), ""),
        "{}",
        again.stderr
    );
    let a = DomainView::parse(&again.defined);
    assert_eq!((a.controllers, a.fw_cfg), (w.controllers, w.fw_cfg));
    assert_eq!(cliques(&again.defined), boot_sh_cliques());
    assert_eq!(smbios(&again.defined), smbios(&input));
}
