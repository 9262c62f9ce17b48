//! What a DRA driver built on this layer implements: the node side of
//! NodePrepareResources and NodeUnprepareResources for one claim at a time,
//! and the ResourceSlices to publish. The layer does the rest (the kubelet's
//! sockets and calls, their deadlines, the slices kept published).

use p2p_allocation::dra::ResourceSlice;

use super::claims::ClaimRef;
use super::deadline::Deadline;

/// A DRA driver's own logic, as the layer calls it. Calls come from blocking
/// threads, several at once (one per claim of a kubelet call).
pub trait DraDriver: Send + Sync + 'static {
    /// Prepares `claim` within `deadline`: what the kubelet hands the
    /// container runtime for each of its devices. Idempotent: a claim
    /// already prepared answers what it answered before.
    fn prepare(
        &self,
        claim: &ClaimRef,
        deadline: Deadline,
    ) -> Result<Vec<PreparedDevice>, ClaimError>;

    /// Unprepares `claim`: undoes what prepare did. Idempotent: a claim not
    /// prepared is no error.
    fn unprepare(&self, claim: &ClaimRef, deadline: Deadline) -> Result<(), ClaimError>;

    /// The node's ResourceSlices as they are now, at pool generation
    /// `generation` (the publisher compares them with what it published,
    /// the generation aside, and publishes them when they differ).
    fn publication(&self, generation: i64) -> Result<Vec<ResourceSlice>, String>;

    /// The health of the devices of the claims prepared now, for the
    /// kubelet's health stream ([`super::device_health`]). None by default.
    fn device_health(&self) -> Vec<DeviceHealth> {
        Vec::new()
    }

    /// Called once the API server is reachable, before the kubelet's calls
    /// are served: the driver lets go of what it recorded for claims the
    /// API server no longer has. Nothing by default.
    fn reconcile(&self) {}
}

/// Why a claim could not be prepared or unprepared: the message names the
/// claim, and the device or function at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClaimError(pub String);

/// One prepared device, as the kubelet is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDevice {
    /// The claim's request it serves.
    pub request: String,
    /// Its pool.
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// The CDI device ids the runtime adds for it.
    pub cdi_ids: Vec<String>,
}

/// What the driver can say of a device's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Working as prepared.
    Healthy,
    /// Failed (gone, taken by another driver, its group broken).
    Unhealthy,
    /// Not known.
    Unknown,
}

/// One prepared device's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHealth {
    /// Its pool.
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// Its health.
    pub health: Health,
    /// Why, for a person.
    pub message: String,
}
