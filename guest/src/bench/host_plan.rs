//! `bench --host-plan FILE`: each pair's route as the host knows it. The
//! guest sees only its own (virtual) PCIe tree; where peer requests really
//! turn (a switch, the root complex, across sockets) is in the host's tree,
//! which `p2p-host plan --json` records per pair (`vms[].pairs[].route`) with
//! the guest address of every device (`guests[].devices[]`). This maps the
//! plan's host pairs to guest addresses so bench can label its pairs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use p2p_report::plan::PlanReport;
use p2p_topology::classify::PeerRoute;
use p2p_topology::Bdf;

/// Why a host plan could not give routes.
#[derive(Debug, thiserror::Error)]
pub enum HostPlanError {
    /// The file could not be read.
    #[error("--host-plan {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// The file is no `p2p-host plan --json` document.
    #[error("--host-plan {}: not a p2p-host plan --json document: {}", .0.display(), p2p_topology::excerpt::json_error(.1))]
    Parse(PathBuf, serde_json::Error),
    /// The plan has no VM of that name, or several and none was named.
    #[error("--host-plan {file}: {why}")]
    Vm {
        /// The plan file.
        file: PathBuf,
        /// What is wrong, naming the VMs the plan holds.
        why: String,
    },
    /// The plan has no guest layout for the VM (`guests[]`), so host
    /// addresses cannot be turned into guest ones.
    #[error(
        "--host-plan {file}: no guest layout (guests[]) for VM {vm}: rerun p2p-host plan --json"
    )]
    NoLayout {
        /// The plan file.
        file: PathBuf,
        /// The VM.
        vm: String,
    },
    /// A pair of the plan has no route (a plan made before routes were kept).
    #[error("--host-plan {file}: VM {vm} pair {a} {b} carries no route (made by an older p2p-host): rerun p2p-host plan --json")]
    NoRoute {
        /// The plan file.
        file: PathBuf,
        /// The VM.
        vm: String,
        /// First host address of the pair.
        a: Bdf,
        /// Second host address of the pair.
        b: Bdf,
    },
    /// A GPU of the plan has no guest address in its layout.
    #[error("--host-plan {file}: VM {vm}: host GPU {host} has no guest address in guests[]")]
    Unplaced {
        /// The plan file.
        file: PathBuf,
        /// The VM.
        vm: String,
        /// The host address.
        host: Bdf,
    },
}

/// The short name of a host route, as bench records it after `pcie-`:
/// `switch`, `acs-redirect`, `acs-unknown`, `root-complex`, `host-bridges`,
/// `sockets`, `unknown-numa`, `local`.
pub fn route_name(r: &PeerRoute) -> &'static str {
    match r {
        PeerRoute::SameFunction => "local",
        PeerRoute::Switch { .. } => "switch",
        PeerRoute::AcsRedirect { .. } => "acs-redirect",
        PeerRoute::AcsUnknown { .. } => "acs-unknown",
        PeerRoute::RootComplex { .. } => "root-complex",
        PeerRoute::HostBridges => "host-bridges",
        PeerRoute::Sockets => "sockets",
        PeerRoute::UnknownNuma => "unknown-numa",
    }
}

/// The host routes of one VM's GPU pairs, by guest addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoutes {
    /// The VM of the plan they come from.
    pub vm: String,
    /// (lower guest address, higher) -> the host's route.
    routes: BTreeMap<(Bdf, Bdf), PeerRoute>,
}

fn key(a: Bdf, b: Bdf) -> (Bdf, Bdf) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

impl HostRoutes {
    /// Reads a `p2p-host plan --json` file and takes VM `vm`'s routes
    /// (`vm` may be None when the plan holds one VM).
    pub fn load(file: &Path, vm: Option<&str>) -> Result<Self, HostPlanError> {
        let text =
            std::fs::read_to_string(file).map_err(|e| HostPlanError::Read(file.into(), e))?;
        let plan: PlanReport =
            serde_json::from_str(&text).map_err(|e| HostPlanError::Parse(file.into(), e))?;
        Self::from_plan(&plan, vm, file)
    }

    /// VM `vm`'s routes from a parsed plan; `file` names it in errors.
    pub fn from_plan(
        plan: &PlanReport,
        vm: Option<&str>,
        file: &Path,
    ) -> Result<Self, HostPlanError> {
        let names: Vec<&str> = plan.vms.iter().map(|v| v.vm.as_str()).collect();
        let index = match vm {
            Some(name) => {
                names
                    .iter()
                    .position(|n| *n == name)
                    .ok_or_else(|| HostPlanError::Vm {
                        file: file.into(),
                        why: format!("no VM {name} (it plans {})", names.join(", ")),
                    })?
            }
            None if names.len() == 1 => 0,
            None => {
                return Err(HostPlanError::Vm {
                    file: file.into(),
                    why: format!(
                        "it plans {} VMs ({}); name this one with --host-plan-vm",
                        names.len(),
                        names.join(", ")
                    ),
                })
            }
        };
        let plan_vm = &plan.vms[index];
        let name = plan_vm.vm.clone();
        let Some(layout) = plan.guests.get(index) else {
            return Err(HostPlanError::NoLayout {
                file: file.into(),
                vm: name,
            });
        };
        let guest = |host: Bdf| {
            layout
                .guest_bdf(host)
                .ok_or_else(|| HostPlanError::Unplaced {
                    file: file.into(),
                    vm: name.clone(),
                    host,
                })
        };
        let mut routes = BTreeMap::new();
        for p in &plan_vm.pairs {
            let Some(route) = &p.route else {
                return Err(HostPlanError::NoRoute {
                    file: file.into(),
                    vm: name,
                    a: p.a,
                    b: p.b,
                });
            };
            routes.insert(key(guest(p.a)?, guest(p.b)?), route.clone());
        }
        Ok(HostRoutes { vm: name, routes })
    }

    /// The host's route between the GPUs the guest sees at `a` and `b`.
    pub fn route(&self, a: Bdf, b: Bdf) -> Option<&PeerRoute> {
        self.routes.get(&key(a, b))
    }

    /// How many pairs the plan gave routes for.
    pub fn len(&self) -> usize {
        self.routes.len()
    }

    /// No pair has a route (a VM of fewer than two GPUs).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}
