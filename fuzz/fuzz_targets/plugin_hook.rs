//! `p2p-host kubevirt plugin-hook`'s MutateDomain handler under arbitrary
//! requests. The first byte picks the form: even, the rest is decoded as a
//! `MutateDomainRequest` (the generated prost type, as tonic would); odd, the
//! rest is a libvirt domain put into a well-formed Boot request with a real
//! VMI, so that mutations of the real domains in tests/fixtures/domains (the
//! seeds scripts/fuzz.sh writes) reach the domain reader. The handler is the
//! one the server serves; its patcher reads the domain with the library's
//! libvirt reader (`vmm::libvirt::Domain::parse`, what every patch starts
//! with) and answers it unchanged, or keeps it with the reader's error (the
//! planner that patches is the command line's and not reachable from here).
//! Asserted: nothing panics; an answer's domain is the request's (this
//! patcher never changes it), and a refusal's message is at most
//! `grpc::MAX_MESSAGE` bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use p2p_host_kube::grpc::MAX_MESSAGE;
use p2p_host_kube::kubevirt_plugin::api::*;
use p2p_host_kube::kubevirt_plugin::{self, Hook, Outcome};
use p2p_host::vmm::libvirt::Domain;
use prost::Message;
use tonic::Request;

type Patcher = fn(&str, &str) -> Outcome;

fn read_domain(domain: &str, _vmi: &str) -> Outcome {
    match Domain::parse(domain) {
        Ok(d) => Outcome::Domain {
            xml: domain.to_string(),
            report: format!("{}: {} hostdev(s)", d.name, d.hostdevs.len()),
        },
        Err(e) => Outcome::Kept {
            reason: e.to_string(),
        },
    }
}

struct Target {
    runtime: tokio::runtime::Runtime,
    hook: Hook<Patcher>,
}

fn target() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| Target {
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        hook: kubevirt_plugin::service(read_domain as Patcher, |_| {}),
    })
}

const VMI: &str = r#"{"kind":"VirtualMachineInstance","apiVersion":"kubevirt.io/v1","metadata":{"name":"train-01","namespace":"gpu-jobs","annotations":{"vp2p.io/gpu-class":"0108"}}}"#;

fuzz_target!(|data: &[u8]| {
    let Some((&form, body)) = data.split_first() else {
        return;
    };
    let req = if form % 2 == 0 {
        match MutateDomainRequest::decode(body) {
            Ok(r) => r,
            Err(_) => return,
        }
    } else {
        MutateDomainRequest {
            domain_type: DOMAIN_TYPE_LIBVIRT.into(),
            domain: body.to_vec(),
            vmi: VMI.as_bytes().to_vec(),
            sidecar_context: Some(SidecarContext {
                invocation_context: "Boot".into(),
            }),
        }
    };
    let sent = req.domain.clone();
    let t = target();
    let answer = t.runtime.block_on(t.hook.mutate_domain(Request::new(req)));
    match answer {
        Ok(r) => assert_eq!(r.into_inner().domain, sent),
        Err(e) => assert!(e.message().len() <= MAX_MESSAGE, "{}", e.message().len()),
    }
});
