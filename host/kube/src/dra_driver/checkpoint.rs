//! What vp2p's driver records of each claim in its checkpoint (the file's
//! mechanics are the layer's, [`kubelet_plugin::checkpoint`]). Each step
//! that changes the node is recorded before it is taken: a function is
//! recorded with its driver before it is bound, so a crash between the two
//! leaves a record that unprepare, or the next prepare's rollback, acts on.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::kubelet_plugin::{self, PreparedDevice};

/// The checkpoint file's format version.
pub const VERSION: u32 = 1;

/// Every claim the driver prepared or is preparing, by uid.
pub type Checkpoint = kubelet_plugin::checkpoint::Checkpoint<Entry>;

/// The checkpoint as the driver keeps it, in memory and on disk.
pub type CheckpointFile = kubelet_plugin::checkpoint::CheckpointFile<Entry>;

/// The checkpoint at `path`; an absent file is an empty checkpoint.
pub fn load(path: &std::path::Path) -> Result<Checkpoint, String> {
    Checkpoint::load(path, VERSION).map_err(|e| e.to_string())
}

/// Where a claim's preparation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Started, not finished: a restart found it mid-way.
    Preparing,
    /// Done; the devices are the answer.
    Prepared,
}

/// One claim's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// Where it stands.
    pub state: State,
    /// The devices prepared (their CDI ids once prepared).
    pub devices: Vec<RecordedDevice>,
    /// Functions this driver bound to vfio-pci for the claim, with the
    /// driver each had before (given back at unprepare).
    pub bound: Vec<Bound>,
    /// Files written for the claim (CDI spec, device metadata).
    pub files: Vec<PathBuf>,
}

/// One prepared device as recorded: the kubelet's answer and the
/// function's PCI address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedDevice {
    /// The claim's request it serves.
    pub request: String,
    /// Its pool.
    pub pool: String,
    /// Its name in the pool.
    pub device: String,
    /// Its PCI address.
    pub bdf: String,
    /// The CDI device ids the runtime adds for it.
    pub cdi_ids: Vec<String>,
    /// Allocated for administrative access: nothing bound, no device node.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
}

impl RecordedDevice {
    /// What the kubelet is told of it.
    pub fn answer(&self) -> PreparedDevice {
        PreparedDevice {
            request: self.request.clone(),
            pool: self.pool.clone(),
            device: self.device.clone(),
            cdi_ids: self.cdi_ids.clone(),
        }
    }
}

/// A function bound by the driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bound {
    /// Its PCI address.
    pub bdf: String,
    /// Its driver before (none: it had none).
    pub driver: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_checkpoint_is_empty_and_a_saved_one_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugins/gpu.vp2p.io/checkpoint.json");
        let mut c = load(&path).unwrap();
        assert!(c.claims.is_empty());
        c.claims.insert(
            "u1".into(),
            Entry {
                namespace: "vms".into(),
                name: "c".into(),
                state: State::Preparing,
                devices: Vec::new(),
                bound: vec![Bound {
                    bdf: "0000:27:00.0".into(),
                    driver: Some("nvme".into()),
                }],
                files: Vec::new(),
            },
        );
        c.save(&path).unwrap();
        assert_eq!(load(&path).unwrap(), c);
        // Written through a temporary file that is gone after the rename.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["checkpoint.json"]);
    }
}
