//! The resource's GPUs and what the kubelet asks of them, without gRPC: which
//! GPUs the plugin offers, their health from sysfs, the preferred allocation
//! (the chooser, as `p2p-host allocate`) and a container's allocation.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use p2p_allocation::chooser::{choose, ChooseError, FmPartition, Request};
use p2p_allocation::clique::MaxLevel;
use p2p_topology::{Bdf, GpuSelector, Role, Topology, TopologyReadError, TopologyReader};

use super::api::{self, ContainerAllocateResponse, Device, DeviceSpec, NumaNode, TopologyInfo};
use crate::grpc::quote;

/// The driver a GPU must be bound to for the plugin to offer it.
pub const VFIO_DRIVER: &str = "vfio-pci";

/// Which functions are the resource's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selector {
    /// NVIDIA display-class functions (`p2p-host`'s default GPUs).
    Nvidia,
    /// Functions of this vendor and device ID (KubeVirt's `pciVendorSelector`).
    VendorDevice {
        /// PCI vendor ID.
        vendor: u16,
        /// PCI device ID.
        device: u16,
    },
}

/// `--selector` that is not `VENDOR:DEVICE` in hex.
#[derive(Debug, thiserror::Error)]
#[error("selector {0:?} is not VENDOR:DEVICE (two hex IDs, e.g. 10DE:2330)")]
pub struct SelectorError(String);

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || SelectorError(s.to_string());
        let (v, d) = s.split_once(':').ok_or_else(bad)?;
        let hex = |x: &str| {
            (x.len() == 4)
                .then(|| u16::from_str_radix(x, 16).ok())
                .flatten()
        };
        Ok(Selector::VendorDevice {
            vendor: hex(v).ok_or_else(bad)?,
            device: hex(d).ok_or_else(bad)?,
        })
    }
}

/// KubeVirt's environment variable for a PCI resource: `PCI_RESOURCE_` and
/// the name upper-cased with `/` and `.` as `_` (KubeVirt
/// `pkg/util/util.go` `ResourceNameToEnvVar` with `PCIResourcePrefix`).
pub fn kubevirt_env_var(resource: &str) -> String {
    let name: String = resource
        .chars()
        .map(|c| match c {
            '/' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("PCI_RESOURCE_{name}")
}

/// The plugin's socket file name for a resource (in the device-plugins directory).
pub fn socket_name(resource: &str) -> String {
    let name: String = resource
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("vp2p-{name}.sock")
}

/// The resource's GPUs, found at start: every selected function bound to vfio-pci.
#[derive(Debug)]
pub struct Inventory {
    reader: Arc<dyn TopologyReader>,
    root: PathBuf,
    resource: String,
    gpus: Vec<Bdf>,
    policy: Policy,
}

/// How GetPreferredAllocation chooses: the options `p2p-host allocate` takes.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Farthest class that still shares a clique.
    pub max_level: MaxLevel,
    /// Refuse when no N available GPUs are one clique (the kubelet then
    /// falls back to its own choice), instead of answering the nearest set.
    pub strict: bool,
    /// Fabric Manager's partitions: answer only whole, inactive partitions.
    pub partitions: Option<Vec<FmPartition>>,
}

impl Inventory {
    /// Reads `sysfs_root` with `reader` for the selected functions bound to
    /// vfio-pci.
    pub fn discover(
        reader: Arc<dyn TopologyReader>,
        sysfs_root: &Path,
        resource: &str,
        selector: Selector,
    ) -> Result<Self, TopologyReadError> {
        let root = sysfs_root.to_path_buf();
        let topo = reader.read(&root)?;
        let nvidia = GpuSelector::Nvidia;
        let gpus = topo
            .functions
            .iter()
            .filter(|f| match selector {
                Selector::Nvidia => nvidia.role(f) == Role::Gpu,
                Selector::VendorDevice { vendor, device } => {
                    f.vendor == vendor && f.device == device
                }
            })
            .filter(|f| f.driver.as_deref() == Some(VFIO_DRIVER))
            .map(|f| f.bdf)
            .collect();
        Ok(Self {
            reader,
            root,
            resource: resource.to_string(),
            gpus,
            policy: Policy::default(),
        })
    }

    /// The same inventory choosing under `policy`.
    pub fn with_policy(self, policy: Policy) -> Self {
        Self { policy, ..self }
    }

    /// The GPUs offered, in address order.
    pub fn gpus(&self) -> &[Bdf] {
        &self.gpus
    }

    /// Reads the tree now.
    pub fn scan(&self) -> Result<Topology, TopologyReadError> {
        self.reader.read(&self.root)
    }

    /// Every GPU with its health now: healthy while present and bound to vfio-pci.
    pub fn devices(&self, topo: &Topology) -> Vec<Device> {
        self.gpus
            .iter()
            .map(|b| {
                let f = topo.function(*b);
                let healthy = f.is_some_and(|f| f.driver.as_deref() == Some(VFIO_DRIVER));
                Device {
                    id: b.to_string(),
                    health: if healthy {
                        api::HEALTHY
                    } else {
                        api::UNHEALTHY
                    }
                    .to_string(),
                    topology: f.and_then(|f| f.numa_node).map(|n| TopologyInfo {
                        nodes: vec![NumaNode { id: n.into() }],
                    }),
                }
            })
            .collect()
    }

    /// GetPreferredAllocation for one container: the chooser's GPUs, as
    /// `p2p-host allocate --gpus <these GPUs>` answers.
    pub fn preferred(
        &self,
        topo: &Topology,
        available: &[String],
        must_include: &[String],
        size: i32,
    ) -> Result<Vec<String>, RequestError> {
        let available = self.parse_ids(available)?;
        let must_include = self.parse_ids(must_include)?;
        let size = usize::try_from(size).map_err(|_| RequestError::Size(size))?;
        let req = Request {
            gpus: size,
            nics: 0,
            must_include,
            max_level: self.policy.max_level,
            strict: self.policy.strict,
        };
        let selector = GpuSelector::List {
            bdfs: self.gpus.clone(),
        };
        let choice = choose(
            topo,
            &selector,
            &available,
            &req,
            self.policy.partitions.as_deref(),
        )?;
        Ok(choice.gpus.iter().map(Bdf::to_string).collect())
    }

    /// Allocate for one container: `/dev/vfio/vfio` and each IOMMU group's
    /// device, and KubeVirt's `PCI_RESOURCE_...` variable with the addresses
    /// (KubeVirt `pkg/virt-handler/device-manager/pci_device.go`, Allocate).
    pub fn allocate(
        &self,
        topo: &Topology,
        ids: &[String],
    ) -> Result<ContainerAllocateResponse, RequestError> {
        let bdfs = self.parse_ids(ids)?;
        // As GetPreferredAllocation (the chooser) refuses them: a list that
        // names a GPU twice is not one the kubelet sends.
        let mut seen = BTreeSet::new();
        if let Some(b) = bdfs.iter().find(|b| !seen.insert(**b)) {
            return Err(RequestError::Choose(ChooseError::Duplicate(*b)));
        }
        let mut groups = BTreeSet::new();
        for b in &bdfs {
            let f = topo.function(*b).ok_or(RequestError::Gone(*b))?;
            if f.driver.as_deref() != Some(VFIO_DRIVER) {
                return Err(RequestError::NotVfio(*b, f.driver.clone()));
            }
            groups.insert(f.iommu_group.ok_or(RequestError::NoGroup(*b))?);
        }
        let spec = |path: String| DeviceSpec {
            container_path: path.clone(),
            host_path: path,
            permissions: "mrw".to_string(),
        };
        let mut devices = vec![spec("/dev/vfio/vfio".to_string())];
        devices.extend(groups.iter().map(|g| spec(format!("/dev/vfio/{g}"))));
        let list: Vec<String> = bdfs.iter().map(Bdf::to_string).collect();
        let envs = HashMap::from([(kubevirt_env_var(&self.resource), list.join(","))]);
        Ok(ContainerAllocateResponse {
            envs,
            devices,
            ..Default::default()
        })
    }

    fn parse_ids(&self, ids: &[String]) -> Result<Vec<Bdf>, RequestError> {
        ids.iter()
            .map(|id| {
                id.parse::<Bdf>()
                    .ok()
                    .filter(|b| self.gpus.contains(b))
                    .ok_or_else(|| RequestError::UnknownId(quote(id), self.resource.clone()))
            })
            .collect()
    }
}

/// A kubelet request the plugin refuses.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// An id that is not one of the resource's GPUs (quoted by
    /// [`crate::grpc::quote`]: at most its first bytes).
    #[error("unknown device id {0}: not a GPU of resource {1}")]
    UnknownId(String, String),
    /// A negative allocation size.
    #[error("allocation size {0} is negative")]
    Size(i32),
    /// The chooser refused.
    #[error("{0}")]
    Choose(#[from] ChooseError),
    /// The GPU left the PCI tree.
    #[error("{0} is no longer on the PCI bus")]
    Gone(Bdf),
    /// The GPU is no longer bound to vfio-pci.
    #[error("{0} is bound to {d}, not vfio-pci", d = .1.as_deref().unwrap_or("no driver"))]
    NotVfio(Bdf, Option<String>),
    /// The GPU has no IOMMU group (IOMMU off).
    #[error("{0} has no IOMMU group: is the IOMMU on?")]
    NoGroup(Bdf),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_var_is_kubevirts() {
        // ResourceNameToEnvVar: upper-cased, `/` and `.` as `_`.
        assert_eq!(
            kubevirt_env_var("nvidia.com/GH100_H100_SXM5_80GB"),
            "PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB"
        );
        assert_eq!(
            kubevirt_env_var("vp2p.io/nvme"),
            "PCI_RESOURCE_VP2P_IO_NVME"
        );
    }

    #[test]
    fn socket_name_is_one_plain_file_name() {
        assert_eq!(
            socket_name("nvidia.com/GH100"),
            "vp2p-nvidia_com_GH100.sock"
        );
        assert_eq!(socket_name("a/../b"), "vp2p-a____b.sock");
    }

    #[test]
    fn selector_parses_vendor_and_device_in_hex() {
        assert_eq!(
            "10DE:2330".parse::<Selector>().unwrap(),
            Selector::VendorDevice {
                vendor: 0x10de,
                device: 0x2330
            }
        );
        for bad in [
            "10de",
            "10de:",
            "10de:23301",
            "zzzz:2330",
            ":2330",
            "10de:2330:1",
        ] {
            let e = bad.parse::<Selector>().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("selector {bad:?} is not VENDOR:DEVICE (two hex IDs, e.g. 10DE:2330)")
            );
        }
    }
}
