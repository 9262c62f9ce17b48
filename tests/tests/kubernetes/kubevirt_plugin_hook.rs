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

use p2p_host_kube::kubevirt_plugin::api::*;
use p2p_host_kube::kubevirt_plugin::{ERROR_METADATA, PLUGIN_NAME};
use p2p_tests::grpc_wire::protobuf::{varint, Decoded, Writer};
use p2p_tests::grpc_wire::raw;
use p2p_tests::grpc_wire::table::KUBEVIRT_HOOKS_V1ALPHA1;
use p2p_tests::kubevirt_case::{
    assert_mirrored, cliques, hand, on_define_domain, plugin_domain, schema_form, vmi, HookProcess,
};
use p2p_tests::libvirt::{validate, DomainView};
use tonic::Code;

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

/// A client of the hook's socket, which is in the plugin's directory.
async fn connect(hook: &HookProcess) -> DomainHookServiceClient<tonic::transport::Channel> {
    assert!(hook.socket.parent().unwrap().ends_with(PLUGIN_NAME));
    DomainHookServiceClient::new(connect_unix(&hook.socket).await.unwrap())
}

#[tokio::test]
async fn boot_gets_the_domain_with_cliques_as_the_sidecar_makes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let mut client = connect(&hook).await;
    let input = plugin_domain();
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
    assert_eq!(out, on_define_domain(&vmi(&[]), &input));
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
    assert_mirrored(&m);
    assert_eq!(m, on_define_domain(&mirror, &input));

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
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let mut client = connect(&hook).await;
    let input = plugin_domain();

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
    let mut fresh = connect(&hook).await;
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
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let mut client = connect(&hook).await;
    let input = plugin_domain();
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
    let booted = on_define_domain(&vmi(&[]), &input);
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
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let t = &KUBEVIRT_HOOKS_V1ALPHA1;
    let path = t.method("DomainHookService", "MutateDomain").path;
    let input = plugin_domain();
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
        on_define_domain(&v, &input)
    );
    drop(hook);
}

/// A megabyte of the caller's input is quoted by its first bytes and its
/// length, not echoed whole into the status message (a gRPC client accepts
/// about 16 KiB of headers and would see RESOURCE_EXHAUSTED instead).
#[tokio::test]
async fn a_megabyte_domain_type_is_refused_with_a_bounded_quote() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = HookProcess::plugin_hook_in(tmp.path());
    let mut client = connect(&hook).await;
    let mut r = request(&plugin_domain(), &vmi(&[]), "Boot");
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
    let r = request(&plugin_domain(), &vmi(&[]), &"B".repeat(1 << 20));
    let e = client.mutate_domain(r).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().len() < 300, "{}", e.message().len());
}
