//! The node's devices as the driver publishes them: its PCI tree read from
//! sysfs and its ResourceSlices built from it (the devices `dra slices`
//! prints with the same options), and the last such publication kept, so
//! that a claim is resolved against what the scheduler saw rather than a
//! tree read again for every claim.

use std::sync::{Arc, Mutex};

use p2p_allocation::dra::Publication;
use p2p_topology::Topology;

use super::Settings;

/// One reading of the node: its tree and the publication built from it.
#[derive(Debug)]
pub struct Built {
    /// The tree as read.
    pub topo: Topology,
    /// Its slices, the devices left out and why.
    pub publication: Publication,
}

/// The node's tree as read now, and its slices at pool generation
/// `generation`.
pub fn build(settings: &Settings, generation: i64) -> Result<(Topology, Publication), String> {
    let topo = settings
        .reader
        .read(&settings.sysfs_root)
        .map_err(|e| format!("reading {}: {e}", settings.sysfs_root.display()))?;
    let mut opts = p2p_allocation::dra::SliceOptions::new(
        &settings.plugin.node_name,
        &settings.plugin.driver_name,
        &settings.selector,
    );
    opts.bind = settings.bind;
    opts.order = settings.order;
    opts.generation = generation;
    let partitions = settings.partitions.as_ref().map(|p| p.current());
    opts.partitions = partitions.as_deref().map(Vec::as_slice);
    let publication = p2p_allocation::dra::build_slices(&topo, &opts).map_err(|e| e.to_string())?;
    Ok((topo, publication))
}

/// The last publication built, shared by the publisher (which builds it)
/// and the claims (which resolve against it).
#[derive(Debug, Default)]
pub struct LastBuilt(Mutex<Option<Arc<Built>>>);

impl LastBuilt {
    /// None built yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last one built, if any.
    pub fn get(&self) -> Option<Arc<Built>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Builds the publication now ([`build`]) and keeps it as the last.
    pub fn build(&self, settings: &Settings, generation: i64) -> Result<Arc<Built>, String> {
        let (topo, publication) = build(settings, generation)?;
        let built = Arc::new(Built { topo, publication });
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(built.clone());
        Ok(built)
    }
}
