//! NodePrepareResources and NodeUnprepareResources without gRPC: for each
//! claim, the devices the scheduler gave this driver, their IOMMU groups
//! made whole on vfio-pci, the CDI spec and the device metadata written, the
//! checkpoint kept. One claim at a time (a lock): the kubelet rarely sends
//! two at once, and the checkpoint stays one consistent file.

use std::collections::BTreeSet;
use std::sync::Mutex;

use p2p_shared::dra::claim::{AllocatedDevice, ResourceClaim};
use p2p_shared::dra::{Device, PCI_BUS_ID};
use p2p_shared::Bdf;
use serde_json::json;

use super::cdi;
use super::checkpoint::{Bound, Checkpoint, Entry, PreparedDevice, State};
use super::claims::{ClaimRef, ClaimSource};
use super::vfio::{PciBus, VFIO_PCI};
use super::Settings;

/// Why a claim could not be prepared or unprepared: the message names the
/// claim, and the device or function at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClaimError(pub String);

/// The node side of the driver: prepares and unprepares claims.
pub struct Driver {
    settings: Settings,
    claims: Box<dyn ClaimSource>,
    bus: PciBus,
    checkpoint: Mutex<Checkpoint>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// One device of a claim, resolved against this node's tree.
struct Resolved {
    alloc: AllocatedDevice,
    bdf: Bdf,
    group: u32,
    published: Device,
}

impl Driver {
    /// A driver with `settings`, reading claims from `claims`; the
    /// checkpoint is read now (a claim found mid-preparation is finished or
    /// rolled back by the next call that names it).
    pub fn new(settings: Settings, claims: Box<dyn ClaimSource>) -> Result<Self, String> {
        let checkpoint = Checkpoint::load(&settings.checkpoint)?;
        let root = settings
            .reader
            .files(&settings.sysfs_root)
            .map_err(|e| format!("{}: {e}", settings.sysfs_root.display()))?;
        let bus = PciBus::new(&root, settings.bind_timeout);
        Ok(Self {
            settings,
            claims,
            bus,
            checkpoint: Mutex::new(checkpoint),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Checkpoint> {
        // A panic while holding the lock leaves the checkpoint as last saved.
        self.checkpoint.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn save(&self, cp: &Checkpoint, claim: &ClaimRef) -> Result<(), ClaimError> {
        cp.save(&self.settings.checkpoint).map_err(|e| {
            ClaimError(format!(
                "{claim}: writing the checkpoint {}: {e}",
                self.settings.checkpoint.display()
            ))
        })
    }

    /// Prepares `claim`: its devices' CDI ids. Idempotent: a claim already
    /// prepared answers what it answered before.
    pub fn prepare(&self, claim: &ClaimRef) -> Result<Vec<PreparedDevice>, ClaimError> {
        let mut cp = self.lock();
        if let Some(e) = cp.claims.get(&claim.uid) {
            if e.state == State::Prepared {
                return Ok(e.devices.clone());
            }
        }
        let object = self
            .claims
            .claim(claim)
            .map_err(|e| ClaimError(format!("{claim}: reading the claim: {e}")))?;
        if object.metadata.uid != claim.uid {
            return Err(ClaimError(format!(
                "{claim}: the claim read has uid {:?}, another claim of that name",
                object.metadata.uid
            )));
        }
        let resolved = self.resolve(claim, &object)?;
        // Record the claim before anything on the node changes; a record left
        // by a run that died mid-way keeps the functions it bound.
        let bound_before = cp
            .claims
            .get(&claim.uid)
            .map(|e| e.bound.clone())
            .unwrap_or_default();
        cp.claims.insert(
            claim.uid.clone(),
            Entry {
                namespace: claim.namespace.clone(),
                name: claim.name.clone(),
                state: State::Preparing,
                devices: Vec::new(),
                bound: bound_before,
                files: Vec::new(),
            },
        );
        self.save(&cp, claim)?;
        match self.prepare_recorded(&mut cp, claim, &object, &resolved) {
            Ok(devices) => Ok(devices),
            Err(e) => {
                // Nothing half-done: give back what was bound, remove what was
                // written, forget the claim.
                let undo = self.undo(&mut cp, claim);
                cp.claims.remove(&claim.uid);
                let saved = self.save(&cp, claim);
                let mut msg = e.0;
                if let Err(u) = undo.and(saved) {
                    msg.push_str(&format!("; undoing it: {}", u.0));
                }
                Err(ClaimError(msg))
            }
        }
    }

    fn resolve(
        &self,
        claim: &ClaimRef,
        object: &ResourceClaim,
    ) -> Result<Vec<Resolved>, ClaimError> {
        let s = &self.settings;
        let ours: Vec<&AllocatedDevice> = object
            .results()
            .iter()
            .filter(|r| r.driver == s.driver_name)
            .collect();
        if ours.is_empty() {
            let others: BTreeSet<&str> =
                object.results().iter().map(|r| r.driver.as_str()).collect();
            return Err(ClaimError(if others.is_empty() {
                format!("{claim}: not allocated (no devices in its status)")
            } else {
                format!(
                    "{claim}: no device of driver {} (its devices are of {})",
                    s.driver_name,
                    others.into_iter().collect::<Vec<_>>().join(", ")
                )
            }));
        }
        super::claims::check_path_names(claim, object, &s.driver_name).map_err(ClaimError)?;
        let (topo, publication) = super::build(s, 0)
            .map_err(|e| ClaimError(format!("{claim}: this node's devices: {e}")))?;
        let mut out = Vec::new();
        for r in ours {
            if r.pool != s.node_name {
                return Err(ClaimError(format!(
                    "{claim}: device {} is in pool {:?}, not this node's ({:?})",
                    r.device, r.pool, s.node_name
                )));
            }
            let Some(d) = publication.devices().find(|d| d.name == r.device) else {
                let why = publication
                    .left_out
                    .iter()
                    .find(|l| {
                        p2p_shared::dra::names::device_name(&l.kind.to_string(), l.bdf) == r.device
                    })
                    .map(|l| format!(" ({} is left out: {})", l.bdf, l.reason))
                    .unwrap_or_default();
                return Err(ClaimError(format!(
                    "{claim}: unknown device {:?}: not one this node publishes{why}",
                    r.device
                )));
            };
            let bdf: Bdf = d
                .attributes
                .get(PCI_BUS_ID)
                .and_then(|a| a.as_str())
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| {
                    ClaimError(format!("{claim}: device {} has no PCI address", d.name))
                })?;
            let group = topo
                .function(bdf)
                .and_then(|f| f.iommu_group)
                .ok_or_else(|| {
                    ClaimError(format!(
                        "{claim}: device {} ({bdf}) has no IOMMU group",
                        d.name
                    ))
                })?;
            out.push(Resolved {
                alloc: r.clone(),
                bdf,
                group,
                published: d.clone(),
            });
        }
        Ok(out)
    }

    fn prepare_recorded(
        &self,
        cp: &mut Checkpoint,
        claim: &ClaimRef,
        object: &ResourceClaim,
        resolved: &[Resolved],
    ) -> Result<Vec<PreparedDevice>, ClaimError> {
        let s = &self.settings;
        // Every endpoint of every group: bound to vfio-pci, or bound now.
        let mut to_bind = Vec::new();
        for r in resolved {
            let members = self.bus.group(r.group).map_err(|e| {
                ClaimError(format!(
                    "{claim}: device {} ({}): reading IOMMU group {}: {e}",
                    r.alloc.device, r.bdf, r.group
                ))
            })?;
            for m in members {
                if self.bus.is_bridge(m) {
                    continue;
                }
                let driver = self.bus.driver(m);
                if driver.as_deref() == Some(VFIO_PCI) {
                    continue;
                }
                if !s.bind {
                    return Err(ClaimError(format!(
                        "{claim}: device {} ({}): IOMMU group {} is not viable: {m} is bound to {} (not vfio-pci; start the driver with --bind to bind it)",
                        r.alloc.device,
                        r.bdf,
                        r.group,
                        driver.as_deref().unwrap_or("no driver")
                    )));
                }
                if !to_bind.iter().any(|(b, _, _)| *b == m) {
                    to_bind.push((m, driver, r.alloc.device.clone()));
                }
            }
        }
        for (bdf, driver, device) in to_bind {
            let entry = cp.claims.get_mut(&claim.uid).expect("recorded above");
            if !entry.bound.iter().any(|b| b.bdf == bdf.to_string()) {
                entry.bound.push(Bound {
                    bdf: bdf.to_string(),
                    driver: driver.clone(),
                });
            }
            self.save(cp, claim)?;
            self.bus.bind_vfio(bdf).map_err(|e| {
                ClaimError(format!(
                    "{claim}: device {device}: binding {bdf} to vfio-pci: {e}"
                ))
            })?;
        }
        // The CDI spec and the device metadata.
        let mut devices = Vec::new();
        let mut nodes = Vec::new();
        for r in resolved {
            let edits = if s.iommufd {
                let cdev = self.bus.vfio_cdev(r.bdf).ok_or_else(|| {
                    ClaimError(format!(
                        "{claim}: device {} ({}): no vfio-dev/vfioN in sysfs (--iommufd needs a kernel with VFIO_DEVICE_CDEV)",
                        r.alloc.device, r.bdf
                    ))
                })?;
                vec![
                    "/dev/iommu".to_string(),
                    format!("/dev/vfio/devices/{cdev}"),
                ]
            } else {
                vec![
                    "/dev/vfio/vfio".to_string(),
                    format!("/dev/vfio/{}", r.group),
                ]
            };
            nodes.push((cdi::device_name(&claim.uid, &r.alloc.device), edits));
            devices.push(PreparedDevice {
                request: r.alloc.request.clone(),
                pool: r.alloc.pool.clone(),
                device: r.alloc.device.clone(),
                bdf: r.bdf.to_string(),
                cdi_ids: vec![cdi::qualified(
                    &s.driver_name,
                    &cdi::device_name(&claim.uid, &r.alloc.device),
                )],
            });
        }
        let mut files = Vec::new();
        let mut mounts = Vec::new();
        let mut requests: Vec<&str> = Vec::new();
        for r in resolved {
            if !requests.contains(&r.alloc.request.as_str()) {
                requests.push(&r.alloc.request);
            }
        }
        for request in requests {
            let top = request.split('/').next().unwrap_or(request);
            let of_request: Vec<&Resolved> = resolved
                .iter()
                .filter(|r| r.alloc.request == request)
                .collect();
            let doc = metadata(object, request, &of_request);
            let host = s
                .metadata_dir
                .join(&claim.uid)
                .join(top)
                .join(format!("{}-metadata.json", s.driver_name));
            let text = serde_json::to_vec_pretty(&doc).expect("JSON values serialize");
            super::checkpoint::write_atomic(&host, &text).map_err(|e| {
                ClaimError(format!(
                    "{claim}: writing the device metadata {}: {e}",
                    host.display()
                ))
            })?;
            files.push(host.clone());
            let name = cdi::metadata_name(&claim.uid, top);
            mounts.push((
                name.clone(),
                host,
                cdi::metadata_container_path(object, top, &s.driver_name),
            ));
            // The request's first device carries its metadata mount.
            if let Some(d) = devices.iter_mut().find(|d| d.request == request) {
                d.cdi_ids.push(cdi::qualified(&s.driver_name, &name));
            }
        }
        let spec = cdi::spec(&s.driver_name, &nodes, &mounts);
        let path = cdi::spec_path(&s.cdi_dir, &s.driver_name, &claim.uid);
        let text = serde_json::to_vec_pretty(&spec).expect("JSON values serialize");
        super::checkpoint::write_atomic(&path, &text).map_err(|e| {
            ClaimError(format!(
                "{claim}: writing the CDI spec {}: {e}",
                path.display()
            ))
        })?;
        files.push(path);
        let entry = cp.claims.get_mut(&claim.uid).expect("recorded above");
        entry.files = files;
        entry.devices = devices.clone();
        entry.state = State::Prepared;
        self.save(cp, claim)?;
        Ok(devices)
    }

    /// Removes the claim's files and gives back the functions bound for it;
    /// the first failure is returned after trying everything.
    fn undo(&self, cp: &mut Checkpoint, claim: &ClaimRef) -> Result<(), ClaimError> {
        let Some(entry) = cp.claims.get(&claim.uid).cloned() else {
            return Ok(());
        };
        let mut first = None;
        let mut files = entry.files.clone();
        // Files a run that died wrote but did not record: the spec's name is
        // the claim's; metadata lives in the claim's own directory.
        files.push(cdi::spec_path(
            &self.settings.cdi_dir,
            &self.settings.driver_name,
            &claim.uid,
        ));
        for f in &files {
            if let Err(e) = std::fs::remove_file(f) {
                if e.kind() != std::io::ErrorKind::NotFound && first.is_none() {
                    first = Some(format!("removing {}: {e}", f.display()));
                }
            }
        }
        let dir = self.settings.metadata_dir.join(&claim.uid);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound && first.is_none() {
                first = Some(format!("removing {}: {e}", dir.display()));
            }
        }
        let mut kept = Vec::new();
        for b in entry.bound.iter().rev() {
            let Ok(bdf) = b.bdf.parse::<Bdf>() else {
                continue;
            };
            if let Err(e) = self.bus.give_back(bdf, b.driver.as_deref()) {
                kept.push(b.clone());
                if first.is_none() {
                    first = Some(format!(
                        "giving {bdf} back to {}: {e}",
                        b.driver.as_deref().unwrap_or("no driver")
                    ));
                }
            }
        }
        if let Some(e) = cp.claims.get_mut(&claim.uid) {
            e.bound = kept;
            e.files.clear();
        }
        match first {
            None => Ok(()),
            Some(m) => Err(ClaimError(format!("{claim}: {m}"))),
        }
    }

    /// Unprepares `claim`: undoes exactly what prepare did. Idempotent: a
    /// claim not prepared (or already unprepared) is no error.
    pub fn unprepare(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        let mut cp = self.lock();
        if !cp.claims.contains_key(&claim.uid) {
            return Ok(());
        }
        let undo = self.undo(&mut cp, claim);
        if undo.is_ok() {
            cp.claims.remove(&claim.uid);
        }
        self.save(&cp, claim)?;
        undo
    }

    /// The claims recorded now, by uid (what a restart starts from).
    pub fn recorded(&self) -> Checkpoint {
        self.lock().clone()
    }
}

/// The KEP-5304 device metadata of one request (`DeviceMetadata`,
/// `metadata.resource.k8s.io/v1alpha1`, as the Kubernetes documentation's
/// "Device metadata protocol" defines it): the claim, the request, and each
/// device with the attributes its ResourceSlice publishes, among them
/// `resource.kubernetes.io/pciBusID`, which KubeVirt reads to find the
/// function to pass through.
fn metadata(object: &ResourceClaim, request: &str, devices: &[&Resolved]) -> serde_json::Value {
    let m = &object.metadata;
    let mut doc = json!({
        "kind": "DeviceMetadata",
        "apiVersion": "metadata.resource.k8s.io/v1alpha1",
        "metadata": {"name": m.name, "namespace": m.namespace, "uid": m.uid, "generation": 1},
        "requests": [{
            "name": request,
            "devices": devices.iter().map(|r| json!({
                "driver": r.alloc.driver,
                "pool": r.alloc.pool,
                "name": r.alloc.device,
                "attributes": r.published.attributes,
            })).collect::<Vec<_>>(),
        }],
    });
    if let Some(p) = m
        .annotations
        .get(p2p_shared::dra::claim::POD_CLAIM_NAME_ANNOTATION)
    {
        doc["podClaimName"] = json!(p);
    }
    doc
}
