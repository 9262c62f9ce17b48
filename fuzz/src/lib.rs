//! Invariants the fuzz targets assert. The property tests in shared/tests include
//! the same modules with `#[path]`, so both check one list.

pub mod capability;
pub mod nccl_xml;
pub mod vfio_tree;
pub mod walkers;
