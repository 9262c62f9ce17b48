//! Which functions play which role: GPUs, NVSwitches, NICs.
//!
//! By default a GPU is an NVIDIA display-class function. Test machines and
//! emulated topologies have no NVIDIA parts, so an operator can name the GPUs
//! by class prefix or by address instead of faking vendor ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::bdf::Bdf;
use crate::topology::PciFunction;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u16 = 0x10de;

/// What a function is to vp2p.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A GPU, as the [`GpuSelector`] in use defines one.
    Gpu,
    /// An NVIDIA NVSwitch (class 0x0680); without NVML, NVLink is inferred from them.
    NvSwitch,
    /// A network function with an RDMA device: a NIC row of `nvidia-smi topo -m`,
    /// a candidate for GPUDirect RDMA.
    Nic,
    /// A network function without an RDMA device (virtio-net, plain Ethernet):
    /// `nvidia-smi topo -m` does not list it and NCCL cannot use it for GPUDirect.
    EthernetOnly,
    /// A PCI-to-PCI bridge: a root port or switch port.
    Bridge,
    /// Any other function (storage, USB, management controllers, ...).
    Other,
}

/// A class-code prefix: 2, 4 or 6 hex digits (base class, +subclass, +prog-if).
/// In JSON it is the string the command line takes and the text prints
/// (`"0x0108"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassPrefix {
    /// The prefix's digits as a number (`0x0302` for "0302").
    pub value: u32,
    /// Number of significant hex digits (2, 4 or 6).
    pub digits: u8,
}

/// Why a string is not a class prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a class prefix: want 2, 4 or 6 hex digits such as 03, 0302 or 0x010802")]
pub struct ClassPrefixError(pub String);

impl FromStr for ClassPrefix {
    type Err = ClassPrefixError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let t = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        let digits = t.len();
        if !matches!(digits, 2 | 4 | 6) {
            return Err(ClassPrefixError(s.to_string()));
        }
        let value = u32::from_str_radix(t, 16).map_err(|_| ClassPrefixError(s.to_string()))?;
        Ok(Self {
            value,
            digits: digits as u8,
        })
    }
}

impl fmt::Display for ClassPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:0width$x}", self.value, width = self.digits as usize)
    }
}

impl Serialize for ClassPrefix {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClassPrefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Reports written before 2026-11-23 carried {"value": 264, "digits": 4}.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            Old { value: u32, digits: u8 },
        }
        match Form::deserialize(d)? {
            Form::Text(t) => t.parse().map_err(serde::de::Error::custom),
            Form::Old { value, digits } if matches!(digits, 2 | 4 | 6) => {
                Ok(ClassPrefix { value, digits })
            }
            Form::Old { digits, .. } => Err(serde::de::Error::custom(format!(
                "a class prefix has 2, 4 or 6 digits, not {digits}"
            ))),
        }
    }
}

impl schemars::JsonSchema for ClassPrefix {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ClassPrefix".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "PCI class-code prefix, 2, 4 or 6 hex digits after 0x (base class, subclass, programming interface)",
            "pattern": "^0x([0-9a-f]{2}|[0-9a-f]{4}|[0-9a-f]{6})$"
        })
    }
}

impl ClassPrefix {
    /// True when the 24-bit class code `class` starts with this prefix.
    pub fn matches(&self, class: u32) -> bool {
        let shift = 24 - 4 * u32::from(self.digits);
        (class & 0x00ff_ffff) >> shift == self.value
    }
}

/// How GPUs are told from other endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum GpuSelector {
    /// NVIDIA vendor id and display class (0x03xxxx).
    #[default]
    Nvidia,
    /// Any vendor, class matching the prefix (for emulated test topologies).
    Class {
        /// Class-code prefix a function must match (`--gpu-class`).
        prefix: ClassPrefix,
    },
    /// Exactly these functions.
    List {
        /// Addresses of the functions to treat as GPUs (`--gpus`).
        bdfs: Vec<Bdf>,
    },
}

impl GpuSelector {
    /// True when the selector counts `f` as a GPU.
    pub fn is_gpu(&self, f: &PciFunction) -> bool {
        match self {
            GpuSelector::Nvidia => f.vendor == NVIDIA_VENDOR && f.base_class() == 0x03,
            GpuSelector::Class { prefix } => !f.is_bridge && prefix.matches(f.class),
            GpuSelector::List { bdfs } => bdfs.contains(&f.bdf),
        }
    }

    /// The role of `f` under this selector; GPUs win over other roles.
    pub fn role(&self, f: &PciFunction) -> Role {
        if self.is_gpu(f) {
            Role::Gpu
        } else if f.vendor == NVIDIA_VENDOR && f.base_class() == 0x06 && f.sub_class() == 0x80 {
            Role::NvSwitch
        } else if f.is_bridge {
            Role::Bridge
        } else if f.base_class() == 0x02 && f.has_rdma() {
            Role::Nic
        } else if f.base_class() == 0x02 {
            Role::EthernetOnly
        } else {
            Role::Other
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_prefixes_match_by_their_digits() {
        let p: ClassPrefix = "03".parse().unwrap();
        assert!(p.matches(0x030200) && !p.matches(0x020000));
        let p: ClassPrefix = "0x0108".parse().unwrap();
        assert!(p.matches(0x010802) && !p.matches(0x010601));
        let p: ClassPrefix = "010802".parse().unwrap();
        assert!(p.matches(0x010802) && !p.matches(0x010801));
        assert!("3".parse::<ClassPrefix>().is_err());
        assert!("0x01g8".parse::<ClassPrefix>().is_err());
        assert_eq!(
            "0x0108".parse::<ClassPrefix>().unwrap().to_string(),
            "0x0108"
        );
        // JSON reads as the command line and the text: "0x0108".
        let p: ClassPrefix = "0108".parse().unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"0x0108\"");
        let old: ClassPrefix = serde_json::from_str(r#"{"value":264,"digits":4}"#).unwrap();
        assert_eq!(old, p);
    }
}
