//! `p2p-host kubevirt plugin-hook` against a virt-launcher stand-in speaking
//! KubeVirt 1.9.0's plugin protocol (`DomainHookService.MutateDomain`,
//! pkg/hooks/plugins/v1alpha1/api.proto) over a unix socket in a temporary
//! `kubevirt-plugin/vp2p/` directory.
//!
//! The domain is the one kubevirt_hook.rs passes to the sidecar
//! (tests/fixtures/domains/kubevirt-virt-launcher.xml), in the form 1.9.0's
//! plugin pipeline sends it (kubevirt-1.9-plugin-hook.xml): virt-launcher's
//! DomainSpec unmarshalled into libvirtxml and marshalled again
//! (pkg/virt-launcher/virtwrap/plugins/pipeline.go, sidecar.go), made by
//! running the libvirtxml that KubeVirt v1.9.0 vendors on the sample, with
//! `mode="subsystem"` on the hostdevs, without which that libvirtxml refuses
//! them (kubevirt/kubevirt#18861). Two-space indentation, no `xmlns:qemu` on
//! the root, no `type` on hostdev source addresses. The node is the captured
//! two-socket tree, whose "GPUs" are NVMe functions (hence
//! `vp2p.io/gpu-class: 0108`); at PHB its cliques are boot.sh's table:
//! 23:00.0 and 24:00.0 below one switch share clique 0, 41:00.0 (another
//! root port) is 1, 83:00.0 (the other socket) is 2.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use p2p_host_kube::kubevirt_plugin::api::*;
use p2p_host_kube::kubevirt_plugin::{ERROR_METADATA, PLUGIN_NAME};
use p2p_tests::grpc_wire::protobuf::{varint, Decoded, Writer};
use p2p_tests::grpc_wire::raw;
use p2p_tests::grpc_wire::table::KUBEVIRT_HOOKS_V1ALPHA1;
use p2p_tests::libvirt::{validate, DomainView};
use p2p_tests::{binary, fixture_dir, repo_root};
use tonic::Code;

const TREE: &str = "qemu-11.1-two-socket-iommu-on";

fn domain() -> String {
    std::fs::read_to_string(repo_root().join("tests/fixtures/domains/kubevirt-1.9-plugin-hook.xml"))
        .unwrap()
}

/// A VMI as virt-launcher marshals it, with vp2p's annotations.
fn vmi(annotations: &[(&str, &str)]) -> String {
    let mut ann = serde_json::json!({
        "kubevirt.io/latest-observed-api-version": "v1",
        "vp2p.io/gpu-class": "0108",
    });
    for (k, v) in annotations {
        ann[*k] = serde_json::Value::String(v.to_string());
    }
    serde_json::json!({
        "kind": "VirtualMachineInstance",
        "apiVersion": "kubevirt.io/v1",
        "metadata": {"name": "train-01", "namespace": "gpu-jobs", "annotations": ann,
                     "uid": "0c5e1f7a-3b2d-4e8f-9a61-7d4c2b8e5f13"},
        "spec": {"domain": {"devices": {"gpus": [
            {"name": "gpu1", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu2", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu3", "deviceName": "nvidia.com/GH100_H200"},
            {"name": "gpu4", "deviceName": "nvidia.com/GH100_H200"}]}}},
        "status": {"phase": "Scheduled", "nodeName": "gpu-node-07"}
    })
    .to_string()
}

/// The request virt-launcher sends.
fn request(domain: &str, vmi: &str, context: &str) -> MutateDomainRequest {
    MutateDomainRequest {
        domain_type: DOMAIN_TYPE_LIBVIRT.into(),
        domain: domain.as_bytes().to_vec(),
        vmi: vmi.as_bytes().to_vec(),
        sidecar_context: Some(SidecarContext {
            invocation_context: context.into(),
        }),
    }
}

/// The hook process: stopped with SIGTERM by [`Hook::stop`], killed if dropped.
struct Hook {
    child: Child,
    socket: PathBuf,
    log: std::sync::mpsc::Receiver<String>,
}

impl Drop for Hook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(socket: &Path, extra: &[String]) -> Hook {
    let mut child = Command::new(binary("p2p-host"))
        .args(extra)
        .arg("--socket")
        .arg(socket)
        .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let (tx, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "no socket within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    Hook {
        child,
        socket: socket.to_path_buf(),
        log,
    }
}

impl Hook {
    async fn client(&self) -> DomainHookServiceClient<tonic::transport::Channel> {
        DomainHookServiceClient::new(connect_unix(&self.socket).await.unwrap())
    }

    /// SIGTERM; the exit status and everything logged.
    fn stop(mut self) -> (Option<i32>, String) {
        // SAFETY: kill(2) on the pid of a child we have not waited for yet.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().unwrap();
        let log: Vec<String> = self.log.try_iter().collect();
        (status.code(), log.join("\n"))
    }
}

/// The hook under `dir` at kubevirt-plugin/vp2p/hook.sock, as in the pod.
fn start_in(dir: &Path) -> Hook {
    let socket = dir
        .join("kubevirt-plugin")
        .join(PLUGIN_NAME)
        .join("hook.sock");
    start(&socket, &["kubevirt".into(), "plugin-hook".into()])
}

/// libvirt's schema is stricter than its parser on the empty `<bios>`,
/// `<baseBoard>`, `<chassis>` virt-launcher writes: they go before validating.
fn schema_form(xml: &str) -> String {
    xml.lines()
        .filter(|l| {
            !matches!(
                l.trim(),
                "<bios></bios>" | "<baseBoard></baseBoard>" | "<chassis></chassis>"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn cliques(xml: &str) -> Vec<(String, u8)> {
    DomainView::parse(xml).cliques().into_iter().collect()
}

fn hand(v: &[(&str, u8)]) -> Vec<(String, u8)> {
    v.iter().map(|(b, c)| (b.to_string(), *c)).collect()
}

/// What the sidecar path (`on-define-domain`) prints for the same input.
fn sidecar(vmi: &str, domain: &str) -> String {
    let out = Command::new(binary("p2p-host"))
        .args([
            "kubevirt",
            "on-define-domain",
            "--vmi",
            vmi,
            "--domain",
            domain,
        ])
        .env("VP2P_SYSFS_ROOT", fixture_dir(TREE))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn boot_gets_the_domain_with_cliques_as_the_sidecar_makes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = start_in(tmp.path());
    let mut client = hook.client().await;
    let input = domain();
    validate(&schema_form(&input)).expect("control: the sample in schema form is valid");

    let out = client
        .mutate_domain(request(&input, &vmi(&[]), "Boot"))
        .await
        .unwrap();
    assert!(out.metadata().get(ERROR_METADATA).is_none());
    let out = String::from_utf8(out.into_inner().domain).unwrap();
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
    // The clique goes to QEMU as a frontend property of KubeVirt's own alias.
    let v = DomainView::parse(&out);
    assert_eq!(v.hostdevs["0000:41:00.0"].0, "ua-gpu-gpu3");
    assert_eq!(
        v.properties[&(
            "ua-gpu-gpu3".to_string(),
            "x-nv-gpudirect-clique".to_string()
        )],
        "1"
    );
    // The only additions: xmlns:qemu on the root (libvirtxml drops it) and
    // the override block before </domain>, in the domain's own indentation.
    assert!(out.starts_with(
        "<domain type=\"kvm\" xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\">\n  <name>"
    ));
    let (head, tail) = out
        .split_once("  <qemu:override>\n")
        .expect("override block");
    assert_eq!(
        format!("{head}</domain>").replacen(
            " xmlns:qemu=\"http://libvirt.org/schemas/domain/qemu/1.0\"",
            "",
            1
        ),
        input
    );
    assert!(
        tail.starts_with("    <qemu:device alias=\"ua-gpu-gpu1\">\n"),
        "{tail}"
    );
    // The sidecar path makes the same domain of the same input.
    assert_eq!(out, sidecar(&vmi(&[]), &input));
    // Called again on its own output (another hook's turn): unchanged.
    let again = client
        .mutate_domain(request(&out, &vmi(&[]), "Boot"))
        .await
        .unwrap();
    assert_eq!(String::from_utf8(again.into_inner().domain).unwrap(), out);

    // The mirrored tree, with the NCCL file inline, over the same connection.
    let mirror = vmi(&[("vp2p.io/guest-topology", "mirror")]);
    let m = client
        .mutate_domain(request(&input, &mirror, "Boot"))
        .await
        .unwrap();
    let m = String::from_utf8(m.into_inner().domain).unwrap();
    validate(&schema_form(&m)).unwrap_or_else(|e| panic!("{e}\n{m}"));
    let w = DomainView::parse(&m);
    assert_eq!(w.chain("0000:23:00.0").1, Some(0));
    assert_eq!(
        w.chain("0000:41:00.0").0,
        vec!["pcie-root-port", "pcie-expander-bus"]
    );
    assert_eq!(w.chain("0000:83:00.0").1, Some(1));
    let (file, text) = &w.fw_cfg["opt/vp2p/nccl-topo.xml"];
    assert!(file.is_none() && text.starts_with("<system version=\"1\">"));
    assert_eq!(m, sidecar(&mirror, &input));

    let socket = hook.socket.clone();
    let (code, log) = hook.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(!socket.exists(), "the socket goes with the hook");
    assert!(
        log.contains("serving DomainHookService.MutateDomain on ")
            && log.contains(
                "gpu-jobs/train-01: gpu-jobs_train-01: 4 GPU(s), 3 clique(s), max level PHB: 5 change(s)"
            )
            && log.contains("gpu-jobs/train-01:   declared xmlns:qemu")
            && log.contains("already patched, unchanged"),
        "{log}"
    );
}

#[tokio::test]
async fn bad_requests_get_clear_errors_and_the_hook_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = start_in(tmp.path());
    let mut client = hook.client().await;
    let input = domain();

    let mut r = request(&input, &vmi(&[]), "Boot");
    r.domain_type = "cloud-hypervisor".into();
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "domain_type \"cloud-hypervisor\" is not one vp2p patches (only \"libvirt\")"
    );

    let mut r = request(&input, &vmi(&[]), "Boot");
    r.sidecar_context = None;
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("invocation_context \"\" is not one KubeVirt defines (Boot, MigrationSource, MigrationTarget)"), "{}", e.message());
    let e = client
        .mutate_domain(request(&input, &vmi(&[]), "Hotplug"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("\"Hotplug\""), "{}", e.message());

    let mut r = request(&input, &vmi(&[]), "Boot");
    r.domain = vec![b'<', 0xff, b'>'];
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with("domain is not UTF-8"),
        "{}",
        e.message()
    );

    // A planning error with vp2p.io/on-error: fail stops the VM...
    let fail = vmi(&[("vp2p.io/max-level", "rack"), ("vp2p.io/on-error", "fail")]);
    let e = client
        .mutate_domain(request(&input, &fail, "Boot"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(
        e.message(),
        "vp2p.io/on-error is fail: the VM is not defined: annotation vp2p.io/max-level: \
         'rack' is not one of pix | pxb | phb | node | sys (default phb)"
    );
    // ...and without it the domain passes unchanged, the reason alongside.
    let keep = client
        .mutate_domain(request(
            &input,
            &vmi(&[("vp2p.io/max-level", "rack")]),
            "Boot",
        ))
        .await
        .unwrap();
    let reason = keep
        .metadata()
        .get(ERROR_METADATA)
        .unwrap()
        .to_str()
        .unwrap();
    assert!(reason.contains("'rack' is not one of"), "{reason}");
    assert_eq!(String::from_utf8(keep.into_inner().domain).unwrap(), input);
    let keep = client
        .mutate_domain(request(&input, "{not json", "Boot"))
        .await
        .unwrap();
    assert_eq!(
        keep.metadata()
            .get(ERROR_METADATA)
            .unwrap()
            .to_str()
            .unwrap(),
        "the request's vmi is not JSON: key must be a string at line 1 column 2"
    );

    // Still serving, on a new connection too.
    let mut fresh = hook.client().await;
    let ok = fresh
        .mutate_domain(request(&input, &vmi(&[]), "Boot"))
        .await
        .unwrap();
    let ok = String::from_utf8(ok.into_inner().domain).unwrap();
    assert_eq!(cliques(&ok).len(), 4);
    let (code, log) = hook.stop();
    assert_eq!(code, Some(0));
    assert!(
        log.contains("gpu-jobs/train-01: error: annotation vp2p.io/max-level: 'rack'")
            && log.contains("the domain passes unchanged, without P2P cliques"),
        "{log}"
    );
}

#[tokio::test]
async fn migrations_pass_the_domain_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = start_in(tmp.path());
    let mut client = hook.client().await;
    let input = domain();
    // Even a VMI whose annotations would fail the boot: nothing is planned.
    let fail = vmi(&[("vp2p.io/max-level", "rack"), ("vp2p.io/on-error", "fail")]);
    for context in ["MigrationTarget", "MigrationSource"] {
        for v in [vmi(&[]), fail.clone()] {
            let r = client
                .mutate_domain(request(&input, &v, context))
                .await
                .unwrap();
            assert!(r.metadata().get(ERROR_METADATA).is_none());
            assert_eq!(String::from_utf8(r.into_inner().domain).unwrap(), input);
        }
    }
    // A booted (patched) domain is not patched twice either.
    let booted = sidecar(&vmi(&[]), &input);
    let r = client
        .mutate_domain(request(&booted, &vmi(&[]), "MigrationTarget"))
        .await
        .unwrap();
    assert_eq!(String::from_utf8(r.into_inner().domain).unwrap(), booted);
    let (_, log) = hook.stop();
    assert!(
        log.contains(
            "gpu-jobs/train-01: MigrationTarget: the domain passes unchanged (cliques are set at boot)"
        ),
        "{log}"
    );
}

/// MutateDomain with a request encoded by hand and the answer compared as
/// bytes with an encoding derived by hand from the table: what virt-launcher
/// (a Go program with its own generated code) sends and reads.
#[tokio::test]
async fn mutate_domain_is_the_published_encoding_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = start_in(tmp.path());
    let t = &KUBEVIRT_HOOKS_V1ALPHA1;
    let path = t.method("DomainHookService", "MutateDomain").path;
    let input = domain();
    let v = vmi(&[]);
    let req_field = |n| t.field("MutateDomainRequest", n);
    let encode = |context: &str| {
        // domain_type 1 LEN (0x0a), domain 2 LEN (0x12), vmi 3 LEN (0x1a),
        // sidecar_context 4 LEN (0x22) { invocation_context 1 LEN (0x0a) }.
        let mut want = vec![0x0a, 7];
        want.extend(b"libvirt");
        want.push(0x12);
        varint(input.len() as u64, &mut want);
        want.extend(input.as_bytes());
        want.push(0x1a);
        varint(v.len() as u64, &mut want);
        want.extend(v.as_bytes());
        want.extend([0x22, context.len() as u8 + 2, 0x0a, context.len() as u8]);
        want.extend(context.as_bytes());
        let by_table = Writer::new()
            .string(req_field("domain_type"), "libvirt")
            .bytes(req_field("domain"), input.as_bytes())
            .bytes(req_field("vmi"), v.as_bytes())
            .message(
                req_field("sidecar_context"),
                Writer::new().string(t.field("SidecarContext", "invocation_context"), context),
            )
            .finish();
        assert_eq!(want, by_table);
        want
    };
    let mut c = raw::Client::connect(&hook.socket).await;

    // A migration's domain passes unchanged: the answer is MutateDomainResponse
    // { domain 1 LEN (0x0a) <the domain> }, byte for byte.
    let got = c
        .unary(path, encode("MigrationTarget"))
        .await
        .unwrap()
        .into_inner();
    let mut want = vec![0x0a];
    varint(input.len() as u64, &mut want);
    want.extend(input.as_bytes());
    assert_eq!(got, want);

    // A boot's answer, decoded by the table: the domain the sidecar path makes.
    let got = c.unary(path, encode("Boot")).await.unwrap().into_inner();
    let d = Decoded::parse(&got).unwrap();
    assert_eq!(d.0.len(), 1, "one field");
    let patched = d.all_bytes(t.field("MutateDomainResponse", "domain"));
    assert_eq!(
        String::from_utf8(patched[0].clone()).unwrap(),
        sidecar(&v, &input)
    );
    drop(hook);
}

/// A megabyte of the caller's input is quoted by its first bytes and its
/// length, not echoed whole into the status message (a gRPC client accepts
/// about 16 KiB of headers and would see RESOURCE_EXHAUSTED instead).
#[tokio::test]
async fn a_megabyte_domain_type_is_refused_with_a_bounded_quote() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = start_in(tmp.path());
    let mut client = hook.client().await;
    let mut r = request(&domain(), &vmi(&[]), "Boot");
    r.domain_type = "x".repeat(1 << 20);
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message().len());
    assert_eq!(
        e.message(),
        format!(
            "domain_type \"{}\"... (1048576 bytes) is not one vp2p patches (only \"libvirt\")",
            "x".repeat(64)
        )
    );
    let r = request(&domain(), &vmi(&[]), &"B".repeat(1 << 20));
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 300, "{}", e.message().len());
}
