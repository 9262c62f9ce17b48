//! vp2p's driver, as the kubelet plugin layer calls it ([`DraDriver`]):
//! for each claim, the devices the scheduler gave this driver, their IOMMU
//! groups made whole on vfio-pci, the CDI spec and the device metadata
//! written, the checkpoint kept; and the slices to publish, the last of
//! which claims are resolved against.
//!
//! Claims are prepared at once, each by one call at a time and each IOMMU
//! group bound by one claim at a time ([`Leases`]); the checkpoint is locked
//! only to change and write it (changes made at once share a write), never
//! across an API read, a bind wait or a claim's files. Each step that
//! changes the node is recorded before it is taken, and a claim whose
//! preparation would outlive its [`Deadline`] is rolled back: what the
//! kubelet's retry finds is the claim prepared, or nothing.

use std::collections::BTreeSet;

use p2p_allocation::dra::claim::ResourceClaim;
use p2p_allocation::dra::ResourceSlice;
use p2p_topology::iommu_groups::leaves_group_viable;
use p2p_topology::{Bdf, IommuGroup};

use super::allocation::{resolve, Resolved};
use super::checkpoint::{Bound, Checkpoint, CheckpointFile, Entry, State};
use super::publication::LastBuilt;
use super::vfio::{PciBus, VFIO_PCI};
use super::{cdi, claim_files, Settings};
use crate::kubelet_plugin::checkpoint::remove_stale_temporaries;
use crate::kubelet_plugin::leases::{Lease, Leases};
use crate::kubelet_plugin::{
    ClaimError, ClaimRef, ClaimSource, Deadline, DraDriver, PreparedDevice,
};

/// The node side of the driver: prepares and unprepares claims, and builds
/// the slices to publish.
pub struct Driver {
    settings: Settings,
    claims: Box<dyn ClaimSource>,
    bus: PciBus,
    checkpoint: CheckpointFile,
    /// The publication last built, which claims are resolved against.
    published: LastBuilt,
    /// Claims a call is working on, by uid.
    in_flight: Leases<String>,
    /// IOMMU groups being bound or given back.
    groups: Leases<IommuGroup>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Driver {
    /// A driver with `settings`, reading claims from `claims`; the
    /// checkpoint is read now (a claim found mid-preparation is finished or
    /// rolled back by the next call that names it), and the number of
    /// claims it records told.
    pub fn new(settings: Settings, claims: Box<dyn ClaimSource>) -> Result<Self, String> {
        let path = settings.plugin.checkpoint.clone();
        let (checkpoint, recovering) = super::recovery::open(&settings)?;
        let root = settings
            .reader
            .files(&settings.sysfs_root)
            .map_err(|e| format!("{}: {e}", settings.sysfs_root.display()))?;
        let bus = PciBus::new(&root, settings.bind_timeout);
        let recorded = checkpoint.snapshot().claims.len();
        if recorded > 0 {
            (settings.plugin.log)(&format!(
                "checkpoint {}: {recorded} claim(s) recorded",
                path.display()
            ));
        }
        let driver = Self {
            settings,
            claims,
            bus,
            checkpoint,
            published: LastBuilt::new(),
            in_flight: Leases::new(),
            groups: Leases::new(),
        };
        if let Some(r) = recovering {
            driver.release_recovered(&r)?;
        }
        Ok(driver)
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Where claims are read.
    pub(super) fn claims(&self) -> &dyn ClaimSource {
        self.claims.as_ref()
    }

    /// The node's PCI functions.
    pub(super) fn bus(&self) -> &PciBus {
        &self.bus
    }

    /// Writes the checkpoint as it is now.
    pub(super) fn write_checkpoint(&self) -> std::io::Result<()> {
        self.checkpoint.change(|_| ())
    }

    /// Changes the checkpoint with `f`; returns once it is on disk.
    fn record<R>(
        &self,
        claim: &ClaimRef,
        f: impl FnOnce(&mut Checkpoint) -> R,
    ) -> Result<R, ClaimError> {
        self.checkpoint.change(f).map_err(|e| {
            ClaimError(format!(
                "{claim}: writing the checkpoint {}: {e}",
                self.settings.plugin.checkpoint.display()
            ))
        })
    }

    fn entry(&self, uid: &str) -> Option<Entry> {
        self.checkpoint.entry(uid)
    }

    fn abandoned(claim: &ClaimRef, deadline: Deadline, step: &str) -> ClaimError {
        ClaimError(format!("{claim}: {}", deadline.describe(step)))
    }

    /// Holds `claim` for this call: waits, until `deadline`, for another
    /// call on it (the kubelet's retry while the first still rolls back).
    fn working_on(
        &self,
        claim: &ClaimRef,
        deadline: Deadline,
    ) -> Result<Lease<'_, String>, ClaimError> {
        self.in_flight
            .acquire([claim.uid.clone()], deadline)
            .ok_or_else(|| {
                Self::abandoned(claim, deadline, "waiting for another call on this claim")
            })
    }

    /// Prepares `claim` within `deadline`: its devices' CDI ids. Idempotent:
    /// a claim already prepared answers what it answered before.
    pub fn prepare(
        &self,
        claim: &ClaimRef,
        deadline: Deadline,
    ) -> Result<Vec<PreparedDevice>, ClaimError> {
        let _working = self.working_on(claim, deadline)?;
        if let Some(e) = self.entry(&claim.uid) {
            if e.state == State::Prepared {
                // The kubelet asks again when it makes a pod's sandbox anew
                // after a restart of its own (its claim cache starts
                // unprepared), or after the node rebooted, which took the
                // files on tmpfs and the binding: answered as before when
                // the node kept what the first prepare did, prepared again
                // (the functions' first drivers kept) when it did not.
                match self.missing(&e) {
                    None => {
                        (self.settings.plugin.log)(&format!(
                            "{claim}: prepared before, answered from the checkpoint"
                        ));
                        return Ok(e.devices.iter().map(|d| d.answer()).collect());
                    }
                    Some(what) => (self.settings.plugin.log)(&format!(
                        "{claim}: prepared before, but {what} (a reboot?): preparing it again"
                    )),
                }
            }
        }
        let object = self
            .claims
            .claim(claim, deadline.bound(self.settings.plugin.api_timeout))
            .map_err(|e| ClaimError(format!("{claim}: reading the claim: {e}")))?;
        if object.metadata.uid != claim.uid {
            return Err(ClaimError(format!(
                "{claim}: the claim read has uid {:?}, another claim of that name",
                object.metadata.uid
            )));
        }
        let resolved = resolve(&self.settings, &self.bus, &self.published, claim, &object)?;
        if deadline.passed() {
            // Nothing changed yet; an entry a dead run left stays for the retry.
            return Err(Self::abandoned(claim, deadline, "before changing anything"));
        }
        // Record the claim before anything on the node changes; a record left
        // by a run that died mid-way keeps the functions it bound.
        self.record(claim, |cp| {
            let bound = cp
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
                    bound,
                    files: Vec::new(),
                },
            );
        })?;
        match self.prepare_recorded(claim, &object, &resolved, deadline) {
            Ok(devices) => Ok(devices),
            Err(e) => {
                // Nothing half-done: give back what was bound, remove what was
                // written, forget the claim.
                let undo = self.undo_and_forget(claim);
                let mut msg = e.0;
                if let Err(u) = undo {
                    msg.push_str(&format!("; undoing it: {}", u.0));
                }
                Err(ClaimError(msg))
            }
        }
    }

    fn prepare_recorded(
        &self,
        claim: &ClaimRef,
        object: &ResourceClaim,
        resolved: &[Resolved],
        deadline: Deadline,
    ) -> Result<Vec<PreparedDevice>, ClaimError> {
        self.bind_groups(claim, resolved, deadline)?;
        if deadline.passed() {
            return Err(Self::abandoned(
                claim,
                deadline,
                "before writing its CDI spec",
            ));
        }
        let written = claim_files::write(&self.settings, &self.bus, claim, object, resolved)?;
        if deadline.passed() {
            return Err(Self::abandoned(
                claim,
                deadline,
                "after writing its CDI spec",
            ));
        }
        let answer = written.devices.iter().map(|d| d.answer()).collect();
        self.record(claim, |cp| {
            if let Some(entry) = cp.claims.get_mut(&claim.uid) {
                entry.files = written.files;
                entry.devices = written.devices;
                entry.state = State::Prepared;
            }
        })?;
        Ok(answer)
    }

    /// Every group of `resolved` viable for VFIO and each claimed device on
    /// vfio-pci: a function whose driver keeps its group from being viable
    /// (the kernel's rule, [`leaves_group_viable`]: no driver, vfio-pci and
    /// its variants, pci-stub and pcieport leave it viable) and a claimed
    /// device not on vfio-pci are recorded, then bound to vfio-pci (with
    /// --bind; a bridge is never bound), each bind waited for no longer
    /// than the deadline allows.
    fn bind_groups(
        &self,
        claim: &ClaimRef,
        resolved: &[Resolved],
        deadline: Deadline,
    ) -> Result<(), ClaimError> {
        let s = &self.settings;
        // A device allocated for administrative access is neither bound nor
        // held: its group may be another claim's VM's.
        let resolved: Vec<&Resolved> = resolved.iter().filter(|r| !r.alloc.is_admin()).collect();
        let _groups = self
            .groups
            .acquire(resolved.iter().map(|r| r.group), deadline)
            .ok_or_else(|| {
                Self::abandoned(claim, deadline, "waiting for another claim's IOMMU group")
            })?;
        let claimed: Vec<Bdf> = resolved.iter().map(|r| r.bdf).collect();
        let mut to_bind: Vec<(Bdf, Option<String>, String)> = Vec::new();
        for r in &resolved {
            let members = self.bus.group(r.group).map_err(|e| {
                ClaimError(format!(
                    "{claim}: device {} ({}): reading IOMMU group {}: {e}",
                    r.alloc.device, r.bdf, r.group
                ))
            })?;
            for m in members {
                let driver = self.bus.driver(m);
                let needs_vfio = if claimed.contains(&m) {
                    driver.as_deref() != Some(VFIO_PCI)
                } else {
                    !leaves_group_viable(driver.as_deref())
                };
                if !needs_vfio {
                    continue;
                }
                let bound_to = driver.as_deref().unwrap_or("no driver");
                let what = if m == r.bdf {
                    format!("{m} is bound to {bound_to}, not vfio-pci")
                } else {
                    format!(
                        "IOMMU group {} is not viable: {m} is bound to {bound_to}",
                        r.group
                    )
                };
                if self.bus.is_bridge(m) {
                    return Err(ClaimError(format!(
                        "{claim}: device {} ({}): {what} (a bridge: the driver binds none; bind it to pcieport or unbind it)",
                        r.alloc.device, r.bdf
                    )));
                }
                if !s.bind {
                    return Err(ClaimError(format!(
                        "{claim}: device {} ({}): {what} (start the driver with --bind to bind it to vfio-pci)",
                        r.alloc.device, r.bdf
                    )));
                }
                if !to_bind.iter().any(|(b, _, _)| *b == m) {
                    to_bind.push((m, driver, r.alloc.device.clone()));
                }
            }
        }
        for (bdf, driver, device) in to_bind {
            if deadline.passed() {
                return Err(Self::abandoned(
                    claim,
                    deadline,
                    &format!("before binding {bdf} to vfio-pci"),
                ));
            }
            self.record(claim, |cp| {
                if let Some(entry) = cp.claims.get_mut(&claim.uid) {
                    if !entry.bound.iter().any(|b| b.bdf == bdf.to_string()) {
                        entry.bound.push(Bound {
                            bdf: bdf.to_string(),
                            driver: driver.clone(),
                        });
                    }
                }
            })?;
            let within = deadline.bound(self.bus.timeout);
            self.bus.bind_vfio(bdf, within).map_err(|e| {
                let mut msg = format!("{claim}: device {device}: binding {bdf} to vfio-pci: {e}");
                if within < self.bus.timeout {
                    msg = format!("{msg} ({})", deadline.describe("waiting for the bind"));
                }
                ClaimError(msg)
            })?;
        }
        Ok(())
    }

    /// Removes the claim's files and gives back the functions bound for it
    /// (their groups held meanwhile), then forgets the claim in one write of
    /// the checkpoint; the first failure is returned after trying
    /// everything, and what could not be given back stays recorded.
    pub(super) fn undo_and_forget(&self, claim: &ClaimRef) -> Result<(), ClaimError> {
        let Some(entry) = self.entry(&claim.uid) else {
            return Ok(());
        };
        let mut first = None;
        let mut files = entry.files.clone();
        // Files a run that died wrote but did not record: the spec's name is
        // the claim's; metadata lives in the claim's own directory.
        files.push(cdi::spec_path(
            &self.settings.cdi_dir,
            &self.settings.plugin.driver_name,
            &claim.uid,
        ));
        for f in &files {
            // A run that stopped mid-way may have left a temporary file.
            if entry.state == State::Preparing {
                remove_stale_temporaries(f);
            }
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
        let bound: Vec<(Bdf, Option<String>)> = entry
            .bound
            .iter()
            .filter_map(|b| Some((b.bdf.parse::<Bdf>().ok()?, b.driver.clone())))
            .collect();
        let groups: BTreeSet<IommuGroup> = bound
            .iter()
            .filter_map(|(bdf, _)| self.bus.iommu_group(*bdf))
            .collect();
        let _groups = self.groups.acquire(groups, Deadline::NONE);
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
        kept.reverse();
        let all_undone = first.is_none();
        let recorded = self.record(claim, |cp| {
            if all_undone {
                cp.claims.remove(&claim.uid);
            } else if let Some(e) = cp.claims.get_mut(&claim.uid) {
                e.bound = kept;
                e.files.clear();
            }
        });
        match first {
            None => recorded,
            Some(m) => Err(ClaimError(format!("{claim}: {m}"))),
        }
    }

    /// Unprepares `claim`: undoes exactly what prepare did. Idempotent: a
    /// claim not prepared (or already unprepared) is no error. Once begun it
    /// is finished whatever the deadline (each step leaves less to undo).
    pub fn unprepare(&self, claim: &ClaimRef, deadline: Deadline) -> Result<(), ClaimError> {
        let _working = self.working_on(claim, deadline)?;
        if self.entry(&claim.uid).is_none() {
            return Ok(());
        }
        self.undo_and_forget(claim)
    }

    /// The claims recorded now, by uid (what a restart starts from).
    pub fn recorded(&self) -> Checkpoint {
        self.checkpoint.snapshot()
    }

    /// The node's slices at pool generation `generation`, read from sysfs
    /// now and kept as the publication claims are resolved against.
    pub fn publication(&self, generation: i64) -> Result<Vec<ResourceSlice>, String> {
        let built = self.published.build(&self.settings, generation)?;
        Ok(built.publication.slices.clone())
    }
}

impl DraDriver for Driver {
    fn prepare(
        &self,
        claim: &ClaimRef,
        deadline: Deadline,
    ) -> Result<Vec<PreparedDevice>, ClaimError> {
        Driver::prepare(self, claim, deadline)
    }

    fn unprepare(&self, claim: &ClaimRef, deadline: Deadline) -> Result<(), ClaimError> {
        Driver::unprepare(self, claim, deadline)
    }

    fn publication(&self, generation: i64) -> Result<Vec<ResourceSlice>, String> {
        Driver::publication(self, generation)
    }

    fn reconcile(&self) {
        Driver::reconcile(self);
    }

    fn device_health(&self) -> Vec<crate::kubelet_plugin::driver::DeviceHealth> {
        Driver::device_health(self)
    }
}
