//! `p2p-host dra driver`'s DRAPlugin handlers (v1 and v1beta1) under
//! arbitrary requests and arbitrary claims. The first byte picks the method
//! (bit 0: NodePrepareResources or NodeUnprepareResources) and the version
//! (bit 1: v1 or v1beta1); two bytes (little-endian) give the length of the
//! request, decoded as that method's message (the generated prost type, as
//! tonic would); the rest is the ResourceClaim every named claim reads as.
//! The devices are the five NVMe functions of the captured nested-switch
//! tree, relinked to vfio-pci in a temporary copy; the driver binds nothing
//! (no `--bind`), so sysfs is only read.
//!
//! Asserted: nothing panics; an answer has exactly one entry per uid asked
//! for; every error, in an entry or as a gRPC status, is at most
//! `grpc::MAX_MESSAGE` bytes; a prepared claim's devices are published ones
//! and its CDI spec exists; after every claim recorded in the checkpoint is
//! unprepared, no CDI spec or metadata file is left and the checkpoint
//! file reads back (unprepare undoes exactly what prepare did).
#![no_main]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use p2p_fuzz::vfio_tree::nested_switch_on_vfio;
use p2p_host::sysfs::SysfsReader;
use p2p_host_kube::dra_driver::{checkpoint, Driver, Settings};
use p2p_host_kube::kubelet_plugin::server::DraService;
use p2p_host_kube::kubelet_plugin::{ClaimRef, ClaimSource, Deadline};
use p2p_host_kube::grpc::{kubelet_dra_v1 as v1, kubelet_dra_v1beta1 as v1beta1, MAX_MESSAGE};
use p2p_allocation::dra::claim::ResourceClaim;
use p2p_topology::select::ClassPrefix;
use p2p_topology::GpuSelector;
use prost::Message;
use tonic::{Request, Status};

/// The devices the driver publishes on that tree (25 and 26 share an IOMMU
/// group and are left out).
const PUBLISHED: [&str; 3] = ["gpu-0000-27-00-0", "gpu-0000-28-00-0", "gpu-0000-81-00-0"];

/// The claim of this input: what every claim the kubelet names reads as.
static CLAIM: Mutex<Vec<u8>> = Mutex::new(Vec::new());

struct InputClaims;

impl ClaimSource for InputClaims {
    fn claim(&self, _claim: &ClaimRef, _within: std::time::Duration) -> Result<ResourceClaim, String> {
        let bytes = CLAIM.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }
}

struct Target {
    runtime: tokio::runtime::Runtime,
    service: DraService<Driver>,
    cdi: PathBuf,
    metadata: PathBuf,
    checkpoint: PathBuf,
}

fn target() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| {
        let dir = nested_switch_on_vfio("dra");
        let tree = dir.join("sysfs");
        let selector = GpuSelector::Class {
            prefix: "0108".parse::<ClassPrefix>().unwrap(),
        };
        let reader = Arc::new(SysfsReader::pci_only(selector.clone()));
        let mut s = Settings::new("node-a", "gpu.vp2p.io", &dir.join("kubelet"), reader);
        s.sysfs_root = tree;
        s.selector = selector;
        s.cdi_dir = dir.join("cdi");
        s.metadata_dir = dir.join("metadata");
        s.plugin.log = |_| {};
        let (cdi, metadata, checkpoint) = (
            s.cdi_dir.clone(),
            s.metadata_dir.clone(),
            s.plugin.checkpoint.clone(),
        );
        let driver = Driver::new(s, Box::new(InputClaims)).unwrap();
        Target {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            service: DraService::new(Arc::new(driver), |_| {}),
            cdi,
            metadata,
            checkpoint,
        }
    })
}

fn bounded(what: &str) {
    assert!(what.len() <= MAX_MESSAGE, "{} bytes of message", what.len());
}

/// Regular files under `dir`, at any depth.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The uids a request names, each once.
fn uids<'a>(claims: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
    claims.map(str::to_string).collect()
}

/// Checks one prepare answer: an entry per uid, bounded errors, published
/// devices, a spec for each prepared claim.
fn check_prepared<'a>(
    t: &Target,
    asked: BTreeSet<String>,
    answer: impl Iterator<Item = (&'a String, &'a str, Vec<&'a str>)>,
) {
    let mut got = BTreeSet::new();
    for (uid, error, devices) in answer {
        got.insert(uid.clone());
        bounded(error);
        if error.is_empty() {
            for d in &devices {
                assert!(PUBLISHED.contains(d), "prepared {d}, not published");
            }
            let spec = t.cdi.join(format!("gpu.vp2p.io-{uid}.json"));
            assert!(
                devices.is_empty() || spec.exists(),
                "{uid} prepared without {}",
                spec.display()
            );
        }
    }
    assert_eq!(got, asked);
}

fn status(e: Status) {
    bounded(e.message());
}

fuzz_target!(|data: &[u8]| {
    let [pick, a, b, rest @ ..] = data else {
        return;
    };
    let len = usize::from(u16::from_le_bytes([*a, *b])).min(rest.len());
    let (body, claim) = rest.split_at(len);
    *CLAIM.lock().unwrap_or_else(|e| e.into_inner()) = claim.to_vec();
    let t = target();
    // One arm per method; v1 and v1beta1 share the messages' shape.
    macro_rules! prepare {
        ($m:ident) => {{
            use $m::dra_plugin_server::DraPlugin;
            let Ok(req) = $m::NodePrepareResourcesRequest::decode(body) else {
                return;
            };
            let asked = uids(req.claims.iter().map(|c| c.uid.as_str()));
            match t.service.node_prepare_resources(Request::new(req)).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let answer = r.claims.iter().map(|(u, c)| {
                        let d = c.devices.iter().map(|d| d.device_name.as_str()).collect();
                        (u, c.error.as_str(), d)
                    });
                    check_prepared(t, asked, answer);
                }
                Err(e) => status(e),
            }
        }};
    }
    macro_rules! unprepare {
        ($m:ident) => {{
            use $m::dra_plugin_server::DraPlugin;
            let Ok(req) = $m::NodeUnprepareResourcesRequest::decode(body) else {
                return;
            };
            let asked = uids(req.claims.iter().map(|c| c.uid.as_str()));
            match t.service.node_unprepare_resources(Request::new(req)).await {
                Ok(r) => {
                    let r = r.into_inner();
                    r.claims.values().for_each(|c| bounded(&c.error));
                    assert_eq!(r.claims.keys().cloned().collect::<BTreeSet<_>>(), asked);
                }
                Err(e) => status(e),
            }
        }};
    }
    t.runtime.block_on(async {
        match pick & 3 {
            0 => prepare!(v1),
            1 => unprepare!(v1),
            2 => prepare!(v1beta1),
            _ => unprepare!(v1beta1),
        }
    });
    // Unprepare every recorded claim: nothing may be left behind.
    let recorded = t.service.driver.recorded();
    for (uid, entry) in &recorded.claims {
        let c = ClaimRef {
            namespace: entry.namespace.clone(),
            name: entry.name.clone(),
            uid: uid.clone(),
        };
        t.service
            .driver
            .unprepare(&c, Deadline::NONE)
            .unwrap_or_else(|e| panic!("unpreparing {c}: {}", e.0));
    }
    let left: Vec<_> = files(&t.cdi)
        .into_iter()
        .chain(files(&t.metadata))
        .collect();
    assert!(left.is_empty(), "left after unprepare: {left:?}");
    let after = checkpoint::load(&t.checkpoint).unwrap();
    assert!(after.claims.is_empty(), "{:?}", after.claims.keys());
});
