//! The kubelet's side of the DRA driver, for tests of `p2p-host dra
//! driver`: the plugin watcher's registration (GetInfo, then
//! NotifyRegistrationStatus) and the DRAPlugin calls, as bytes encoded and
//! decoded from the published table ([`crate::grpc_wire`]), never the
//! product's generated code; and a stand-in for the kernel's PCI bus on a
//! copied sysfs tree, which answers `drivers_probe` by relinking `driver` as
//! `driver_override` says (Documentation/ABI/testing/sysfs-bus-pci).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::grpc_wire::protobuf::{Decoded, Writer};
use crate::grpc_wire::raw::Client;
use crate::grpc_wire::table::{Api, KUBELET_DRA_V1, KUBELET_PLUGINREGISTRATION_V1};

/// What GetInfo answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// `type`.
    pub kind: String,
    /// `name`.
    pub name: String,
    /// `endpoint`.
    pub endpoint: String,
    /// `supported_versions`.
    pub versions: Vec<String>,
}

/// Registers the plugin whose registration socket is `socket` as the
/// kubelet's plugin watcher does: GetInfo, then NotifyRegistrationStatus
/// (registered, or not with `refusal`).
pub async fn register(socket: &Path, refusal: Option<&str>) -> PluginInfo {
    let t = &KUBELET_PLUGINREGISTRATION_V1;
    let mut c = Client::connect(socket).await;
    let raw = c
        .unary(t.method("Registration", "GetInfo").path, Vec::new())
        .await
        .expect("GetInfo answers")
        .into_inner();
    let d = Decoded::parse(&raw).expect("a PluginInfo");
    let f = |n| t.field("PluginInfo", n);
    let info = PluginInfo {
        kind: d.string(f("type")),
        name: d.string(f("name")),
        endpoint: d.string(f("endpoint")),
        versions: d.strings(f("supported_versions")),
    };
    let s = |n| t.field("RegistrationStatus", n);
    let mut w = Writer::new();
    match refusal {
        None => w = w.varint(s("plugin_registered"), 1),
        Some(e) => w = w.string(s("error"), e),
    }
    let answer = c
        .unary(
            t.method("Registration", "NotifyRegistrationStatus").path,
            w.finish(),
        )
        .await
        .expect("NotifyRegistrationStatus answers")
        .into_inner();
    assert!(
        answer.is_empty(),
        "RegistrationStatusResponse has no fields"
    );
    info
}

/// A claim as the kubelet names it: (namespace, name, uid).
pub type ClaimId<'a> = (&'a str, &'a str, &'a str);

/// One prepared device as the answer gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// `request_names`.
    pub requests: Vec<String>,
    /// `pool_name`.
    pub pool: String,
    /// `device_name`.
    pub name: String,
    /// `cdi_device_ids`.
    pub cdi_ids: Vec<String>,
}

/// One claim's entry of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimAnswer {
    /// The devices (prepare only).
    pub devices: Vec<Device>,
    /// `error`.
    pub error: String,
}

fn claims_request(api: &Api, message: &str, claims: &[ClaimId]) -> Vec<u8> {
    let c = |n| api.field("Claim", n);
    let mut w = Writer::new();
    for (ns, name, uid) in claims {
        w = w.message(
            api.field(message, "claims"),
            Writer::new()
                .string(c("namespace"), ns)
                .string(c("uid"), uid)
                .string(c("name"), name),
        );
    }
    w.finish()
}

/// The DRA socket's DRAPlugin, called with bytes (API v1 unless told).
pub struct Dra {
    client: Client,
    api: &'static Api,
    /// The deadline each call is sent with (the kubelet's is 45 s); none
    /// unless set.
    pub timeout: Option<Duration>,
}

impl Dra {
    /// A client of the DRAPlugin on `socket`, in `api`'s version.
    pub async fn connect(socket: &Path, api: &'static Api) -> Self {
        Self {
            client: Client::connect(socket).await,
            api,
            timeout: None,
        }
    }

    /// A client of DRAPlugin v1.
    pub async fn v1(socket: &Path) -> Self {
        Self::connect(socket, &KUBELET_DRA_V1).await
    }

    /// NodePrepareResources: each claim's entry by uid.
    pub async fn prepare(
        &mut self,
        claims: &[ClaimId<'_>],
    ) -> Result<BTreeMap<String, ClaimAnswer>, tonic::Status> {
        let t = self.api;
        let body = claims_request(t, "NodePrepareResourcesRequest", claims);
        let raw = self
            .client
            .unary_within(
                t.method("DRAPlugin", "NodePrepareResources").path,
                body,
                self.timeout,
            )
            .await?
            .into_inner();
        let d = Decoded::parse(&raw).expect("a NodePrepareResourcesResponse");
        let r = |n| t.field("NodePrepareResourceResponse", n);
        let dv = |n| t.field("Device", n);
        Ok(entries(t, &d, "NodePrepareResourcesResponse")
            .into_iter()
            .map(|(uid, v)| {
                let devices = v
                    .messages(r("devices"))
                    .into_iter()
                    .map(|x| Device {
                        requests: x.strings(dv("request_names")),
                        pool: x.string(dv("pool_name")),
                        name: x.string(dv("device_name")),
                        cdi_ids: x.strings(dv("cdi_device_ids")),
                    })
                    .collect();
                (
                    uid,
                    ClaimAnswer {
                        devices,
                        error: v.string(r("error")),
                    },
                )
            })
            .collect())
    }

    /// NodeUnprepareResources: each claim's error by uid ("" for none).
    pub async fn unprepare(
        &mut self,
        claims: &[ClaimId<'_>],
    ) -> Result<BTreeMap<String, String>, tonic::Status> {
        let t = self.api;
        let body = claims_request(t, "NodeUnprepareResourcesRequest", claims);
        let raw = self
            .client
            .unary_within(
                t.method("DRAPlugin", "NodeUnprepareResources").path,
                body,
                self.timeout,
            )
            .await?
            .into_inner();
        let d = Decoded::parse(&raw).expect("a NodeUnprepareResourcesResponse");
        let e = t.field("NodeUnprepareResourceResponse", "error");
        Ok(entries(t, &d, "NodeUnprepareResourcesResponse")
            .into_iter()
            .map(|(uid, v)| (uid, v.string(e)))
            .collect())
    }
}

/// The `claims` map of a response: each entry is a message of key 1 and
/// value 2 (protobuf.dev, proto3 guide, "Maps", backwards compatibility).
fn entries(api: &Api, d: &Decoded, message: &str) -> Vec<(String, Decoded)> {
    let map = api.field(message, "claims");
    let key = crate::grpc_wire::table::Field {
        number: 1,
        name: "key",
        ty: crate::grpc_wire::table::Type::String,
        repeated: false,
        optional: false,
    };
    let value = crate::grpc_wire::table::Field {
        number: 2,
        name: "value",
        ty: crate::grpc_wire::table::Type::Message("value"),
        repeated: false,
        optional: false,
    };
    d.messages(map)
        .into_iter()
        .map(|e| {
            (
                e.string(key),
                e.messages(value).pop().unwrap_or(Decoded(Vec::new())),
            )
        })
        .collect()
}

/// The kernel's PCI bus on a copied tree: a thread that, when
/// `bus/pci/drivers_probe` names a function, points its `driver` link at the
/// driver its `driver_override` names (and adds `vfio-dev/vfio<N>` for
/// vfio-pci 50 ms after the link, as a kernel with VFIO_DEVICE_CDEV adds it
/// in the probe that follows the link), or back at the driver
/// it had when the stand-in started when the override is cleared. Functions
/// in `held` are not probed until released; those in `refused` never.
/// `drivers_probe` is a FIFO the stand-in reads, so that probes written at
/// once by claims prepared at once are each seen.
pub struct Kernel {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Functions whose probe waits.
    pub held: Arc<Mutex<BTreeSet<String>>>,
    /// Functions that never bind.
    pub refused: Arc<Mutex<BTreeSet<String>>>,
    /// Every probe done: (function, driver it got).
    pub probes: Arc<Mutex<Vec<(String, String)>>>,
}

/// The function's directory in `tree`.
pub fn function_dir(tree: &Path, bdf: &str) -> PathBuf {
    std::fs::canonicalize(tree.join("bus/pci/devices").join(bdf)).expect("a function of the tree")
}

/// The function's driver now (the `driver` link's last component).
pub fn driver_of(tree: &Path, bdf: &str) -> Option<String> {
    std::fs::read_link(function_dir(tree, bdf).join("driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn relink(tree: &Path, bdf: &str, driver: &str) {
    let link = function_dir(tree, bdf).join("driver");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(tree.join("bus/pci/drivers").join(driver), &link).unwrap();
}

impl Kernel {
    /// Starts the stand-in on `tree`, creating the drivers' directories the
    /// `driver` links point to (captured trees do not copy drivers) so that
    /// `driver/unbind` can be written.
    pub fn start(tree: &Path) -> Self {
        let tree = std::fs::canonicalize(tree).unwrap();
        let mut original = BTreeMap::new();
        for e in std::fs::read_dir(tree.join("bus/pci/devices")).unwrap() {
            let bdf = e.unwrap().file_name().to_string_lossy().into_owned();
            if let Some(d) = driver_of(&tree, &bdf) {
                std::fs::create_dir_all(tree.join("bus/pci/drivers").join(&d)).unwrap();
                relink(&tree, &bdf, &d);
                original.insert(bdf, d);
            }
        }
        std::fs::create_dir_all(tree.join("bus/pci/drivers/vfio-pci")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(Mutex::new(BTreeSet::new()));
        let refused = Arc::new(Mutex::new(BTreeSet::new()));
        let probes = Arc::new(Mutex::new(Vec::new()));
        let (s, h, r, p) = (stop.clone(), held.clone(), refused.clone(), probes.clone());
        // The bus's probe file as a FIFO: each write(2) of a function's
        // address arrives whole and none overwrites another (the kernel takes
        // each write as its own probe), so claims bound at once are all seen.
        let probe = tree.join("bus/pci/drivers_probe");
        let _ = std::fs::remove_file(&probe);
        let made = std::process::Command::new("mkfifo")
            .arg(&probe)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", probe.display());
        // Read and write, so that the FIFO has a reader from now on (a writer
        // never blocks in open) and reads find no end when writers close.
        let mut fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&probe)
            .expect("the probe FIFO opens");
        let thread = std::thread::spawn(move || {
            use std::io::Read;
            let mut minor = 0;
            let mut text = String::new();
            let mut pending: Vec<String> = Vec::new();
            while !s.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(2));
                let mut buf = [0u8; 4096];
                while let Ok(n) = fifo.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    text.extend(buf[..n].iter().map(|&b| b as char));
                }
                // Addresses are written without separators: 12 characters
                // each ("0000:27:00.0"); whitespace between them is skipped.
                text.retain(|c| !c.is_whitespace());
                while text.len() >= 12 {
                    pending.push(text.drain(..12).collect());
                }
                let ready: Vec<String> = {
                    let held = h.lock().unwrap();
                    let (ready, waiting): (Vec<_>, Vec<_>) =
                        pending.drain(..).partition(|b| !held.contains(b));
                    pending = waiting;
                    ready
                };
                for bdf in ready {
                    if r.lock().unwrap().contains(&bdf) {
                        continue;
                    }
                    let dir = function_dir(&tree, &bdf);
                    let over =
                        std::fs::read_to_string(dir.join("driver_override")).unwrap_or_default();
                    let over = over.trim();
                    let driver = if over.is_empty() {
                        original.get(&bdf).cloned()
                    } else {
                        Some(over.to_string())
                    };
                    let _ = std::fs::remove_dir_all(dir.join("vfio-dev"));
                    if let Some(d) = driver {
                        // As the kernel does: `driver` is linked before the
                        // driver's probe runs, and vfio-pci's probe adds the
                        // cdev (drivers/base/dd.c, `really_probe`); the gap
                        // is widened so a reader that does not wait is seen.
                        relink(&tree, &bdf, &d);
                        if d == "vfio-pci" {
                            std::thread::sleep(Duration::from_millis(50));
                            std::fs::create_dir_all(dir.join(format!("vfio-dev/vfio{minor}")))
                                .unwrap();
                            minor += 1;
                        }
                        p.lock().unwrap().push((bdf, d));
                    }
                }
            }
        });
        Self {
            stop,
            thread: Some(thread),
            held,
            refused,
            probes,
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
