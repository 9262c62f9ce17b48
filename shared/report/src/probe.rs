//! The probe report (schema `vp2p.probe/1`) as it crosses the wire: the
//! guest's GPUs with their capability and clique, the hypervisor check,
//! NVLink, what CUDA says, the decision and inconsistencies per pair, and
//! the data checks of `--verify`. The guest reads and decides; this is what
//! it reports ([`ProbeReport::render_text`] for people).

use p2p_topology::{Bdf, Clique, CudaOrdinal};
use serde::{Deserialize, Serialize};

use crate::bench::Mode;

/// Schema tag carried in every probe report.
pub const PROBE_SCHEMA: &str = "vp2p.probe/1";

/// A GPU with everything the probe learnt about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeGpu {
    /// The GPU's PCI address in the guest.
    pub bdf: Bdf,
    /// PCI vendor id as hex text (`0x10de`).
    pub vendor: String,
    /// PCI device id as hex text (`0x2335` for the H200).
    pub device: String,
    /// Bytes the sysfs `config` read returned: 64 for non-root readers, up
    /// to 4096 as root.
    pub config_len: usize,
    /// What the config space says about the P2P clique capability.
    pub capability: CapabilityState,
    /// The clique the driver would read, or null.
    pub clique: Option<u8>,
    /// The driver's BTS capability, when present.
    #[serde(default)]
    pub bts: Option<BtsState>,
    /// Relaxed ordering, payload and read request sizes, link and ATS as the
    /// guest sees them (a VMM may hide or emulate them).
    #[serde(default)]
    pub pcie: Option<GuestPcie>,
    /// CUDA ordinal, when CUDA is available and sees the GPU.
    pub cuda_ordinal: Option<CudaOrdinal>,
    /// Its NVLinks per NVML; None when NVML is unavailable or does not list it.
    pub nvlink: Option<GpuLinks>,
}

/// CUDA's availability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaStatus {
    /// Whether the CUDA driver opened and answered every peer query (false
    /// under `--no-driver`).
    pub available: bool,
    /// Why not, when unavailable.
    pub why: Option<String>,
    /// cuDriverGetVersion (for example 13000); None when CUDA is unavailable.
    pub driver_api: Option<i32>,
}

/// What `--enable` did for one ordered pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EnableResult {
    /// The GPU whose context was given access to `dst`.
    pub src: Bdf,
    /// The GPU whose memory `src` may now access.
    pub dst: Bdf,
    /// Whether peer access is now on (already enabled counts as on).
    pub ok: bool,
    /// `enabled`, the driver's error, or why it was not tried.
    pub answer: String,
}

/// The whole probe report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeReport {
    /// Always `vp2p.probe/1`.
    pub schema: String,
    /// The sysfs root that was scanned (`/sys`, or a captured tree).
    pub sysfs_root: String,
    /// CPUID's hypervisor check; without a hypervisor the driver ignores every
    /// clique.
    pub hypervisor: HypervisorInfo,
    /// Whether CUDA answered, and why not.
    pub cuda: CudaStatus,
    /// Why NVML gave no NVLink facts; None when it answered.
    pub nvml: Option<String>,
    /// Every NVIDIA GPU the guest shows, in address order.
    pub gpus: Vec<ProbeGpu>,
    /// The decision for every unordered pair of GPUs.
    pub pairs: Vec<PeerDecision>,
    /// Flags about single GPUs (pair flags sit in `pairs`).
    pub flags: Vec<Flag>,
    /// Filled by `--enable`.
    pub enabled: Vec<EnableResult>,
    /// Filled by `--verify`: data moved both ways between enabled pairs.
    #[serde(default)]
    pub verify: Vec<VerifyCheck>,
}

/// What CPUID says about a hypervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HypervisorInfo {
    /// CPUID.1:ECX bit 31.
    pub present_bit: bool,
    /// The 12-byte vendor signature from leaf 0x40000000 ("KVMKVMKVM", ...).
    pub signature: Option<String>,
}

impl HypervisorInfo {
    /// The driver's test: the hypervisor bit is set.
    pub fn detected(&self) -> bool {
        self.present_bit
    }
}

/// One GPU's NVLinks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GpuLinks {
    /// The GPU's PCI address in the guest.
    pub bdf: Bdf,
    /// Links NVML reports active (links 0 to 17 are asked).
    pub active: u32,
    /// Active links ending on another GPU of this VM.
    pub to_gpus: u32,
    /// Active links ending elsewhere (NVSwitches, which the VM does not see).
    pub to_switches: u32,
}

/// What a GPU's config space says about the P2P capability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CapabilityState {
    /// A valid capability: the driver would read this clique.
    Present {
        /// Config-space offset of the capability's header.
        #[serde(with = "p2p_topology::hex::u8")]
        #[schemars(with = "p2p_topology::hex::Hex")]
        offset: u8,
        /// The clique the capability names.
        clique: Clique,
    },
    /// The capability list has no P2P capability.
    Absent,
    /// Something at `offset` looks like the capability but the driver would
    /// reject it (bad signature, version != 0, wrong length).
    Invalid {
        /// Config-space offset of the suspect capability.
        #[serde(with = "p2p_topology::hex::u8")]
        #[schemars(with = "p2p_topology::hex::Hex")]
        offset: u8,
        /// Why the driver would reject it.
        why: String,
    },
    /// The config space could not be read far enough (non-root: 64 bytes).
    Unreadable {
        /// What stopped the read: too few bytes, or a broken capability list.
        why: String,
    },
}

impl CapabilityState {
    /// The clique the driver would read; None unless a valid capability is
    /// present.
    pub fn clique(&self) -> Option<Clique> {
        match self {
            CapabilityState::Present { clique, .. } => Some(*clique),
            _ => None,
        }
    }
}

/// A BTS capability found in the list, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BtsState {
    /// Config-space offset of the BTS capability's header.
    #[serde(with = "p2p_topology::hex::u8")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub offset: u8,
    /// Bit 0 of its upper 16 bits: PCIe egress poison enable.
    pub egress_poison: bool,
    /// The upper 16 bits as found.
    #[serde(with = "p2p_topology::hex::u16")]
    #[schemars(with = "p2p_topology::hex::Hex")]
    pub upper: u16,
}

/// What the guest sees of ATS (extended capability 0x000F).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AtsView {
    /// The extended space was not read (fewer than 4096 bytes: not root).
    NotRead,
    /// No ATS capability in the list.
    Absent,
    /// Present, ATS Control bit 15 (Enable) clear.
    Off,
    /// Present and enabled.
    On,
}

/// The link as Link Status and Link Capabilities show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestLink {
    /// Current speed (`32 GT/s`), Link Status bits 3:0.
    pub speed: String,
    /// Negotiated width in lanes, Link Status bits 9:4.
    pub width: u8,
    /// Max Link Speed, Link Capabilities bits 3:0; None for a reserved code.
    pub max_speed: Option<String>,
    /// Maximum Link Width, Link Capabilities bits 9:4.
    pub max_width: u8,
}

/// The guest's view of one GPU's throughput registers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GuestPcie {
    /// Device Control bit 4, Enable Relaxed Ordering.
    pub relaxed_ordering: bool,
    /// Device Control bits 7:5, Max_Payload_Size in bytes.
    pub max_payload: u16,
    /// Device Control bits 14:12, Max_Read_Request_Size in bytes.
    pub max_read_request: u16,
    /// The link; None when Link Status holds a reserved speed.
    pub link: Option<GuestLink>,
    /// ATS as the guest sees it.
    pub ats: AtsView,
    /// Offsets (`0x100`) of extended capabilities whose ID reads 0: hidden
    /// by the VMM, which keeps their place in the list.
    pub hidden_extended_capabilities: Vec<String>,
}

impl GuestPcie {
    /// One line for the GPU table: `RO on, MPS 256, MRRS 4096, 32 GT/s x16, ATS hidden?`.
    pub fn summary(&self) -> String {
        let link = self.link.as_ref().map_or_else(
            || "link ?".to_string(),
            |l| {
                let mut s = format!("{} x{}", l.speed, l.width);
                if l.width < l.max_width {
                    s.push_str(&format!(" of x{}", l.max_width));
                }
                s
            },
        );
        let ats = match self.ats {
            AtsView::NotRead => "ATS not read",
            AtsView::Absent if !self.hidden_extended_capabilities.is_empty() => "ATS not visible",
            AtsView::Absent => "no ATS",
            AtsView::Off => "ATS off",
            AtsView::On => "ATS on",
        };
        format!(
            "RO {}, MPS {}, MRRS {}, {link}, {ats}",
            if self.relaxed_ordering { "on" } else { "off" },
            self.max_payload,
            self.max_read_request
        )
    }
}

/// What to do with a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Enable peer access: both GPUs name one clique, or NVLink joins them.
    Enable,
    /// Keep peer access off: the two capabilities name different cliques and no
    /// NVLink joins the GPUs.
    Disable,
    /// No capability and no NVLink: nothing tells the driver, nor us.
    Unknown,
}

/// A disagreement or a missing fact, with a stable kind for machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Flag {
    /// Which inconsistency, stable for scripts (snake_case in JSON).
    pub kind: FlagKind,
    /// What was found, for people, naming the GPUs by address.
    pub message: String,
}

/// The kinds of inconsistency the probe reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FlagKind {
    /// Capability says yes, CUDA says no (hypervisor hidden, old driver, ...).
    CudaRefusesAllowedPair,
    /// CUDA allows peer access between GPUs in different cliques.
    CudaAllowsAcrossCliques,
    /// Only one GPU of the pair carries the capability.
    CapabilityOnOneSide,
    /// The config read was truncated (not root): the capability is not visible.
    ConfigTruncated,
    /// A capability is present but CPUID shows no hypervisor: the driver ignores it.
    HypervisorHidden,
    /// Something like the capability that the driver would reject.
    InvalidCapability,
    /// NVLink-connected GPUs were put in different cliques.
    NvLinkAcrossCliques,
    /// CUDA answers differ by direction.
    AsymmetricCuda,
    /// The guest sees Enable Relaxed Ordering (Device Control bit 4) off on
    /// a GPU: writes stay strictly ordered (the VMM may hide the bit, or
    /// the driver left it off).
    RelaxedOrderingOff,
    /// P2P is granted but the data moved between the pair did not arrive
    /// whole (`probe --verify`).
    P2pDataLost,
}

/// The driver's answers for one ordered pair, as the probe recorded them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CudaPeer {
    /// cuDeviceCanAccessPeer: the driver allows peer access this way.
    pub can_access: bool,
    /// CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: the driver's relative
    /// rating of the path between the two GPUs.
    pub performance_rank: i32,
    /// CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: atomics work
    /// natively over the path.
    pub native_atomics: bool,
}

/// The decision for one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerDecision {
    /// One GPU of the pair (the lower address, as the probe orders them).
    pub a: Bdf,
    /// The other GPU of the pair.
    pub b: Bdf,
    /// Whether to enable peer access between the two GPUs.
    pub verdict: Verdict,
    /// Why, in words: `both in clique 0`, `NV18`, `cliques differ (0 vs 1)`.
    pub reasons: Vec<String>,
    /// NVLinks between the pair (NVML); None when there are none or NVML is
    /// unavailable.
    pub nvlinks: Option<u32>,
    /// CUDA's answers a->b and b->a; None without CUDA or when it lacks either GPU.
    pub cuda: Option<[CudaPeer; 2]>,
    /// Inconsistencies found for this pair; empty when every fact agrees.
    pub flags: Vec<Flag>,
}

/// One direction and method of one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VerifyCheck {
    /// Source GPU.
    pub src: Bdf,
    /// Destination GPU.
    pub dst: Bdf,
    /// The method.
    pub mode: Mode,
    /// Bytes per copy.
    pub bytes: u64,
    /// Copies made (the last one's bytes are compared).
    pub copies: u32,
    /// Bytes read back and compared.
    pub checked_bytes: u64,
    /// Bytes that differ from what was sent.
    pub mismatched_bytes: u64,
    /// Offset of the first differing byte.
    pub first_bad: Option<u64>,
    /// Set when the copy itself failed (the data is then counted as lost).
    pub error: Option<String>,
}

impl VerifyCheck {
    /// The data arrived whole.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.mismatched_bytes == 0 && self.checked_bytes == self.bytes
    }
}

impl ProbeReport {
    /// The decision for a pair, either order.
    pub fn decision(&self, a: Bdf, b: Bdf) -> Option<&PeerDecision> {
        self.pairs
            .iter()
            .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))
    }
}
