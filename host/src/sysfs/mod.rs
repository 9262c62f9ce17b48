//! Reading PCI topology out of a sysfs tree: the live `/sys` or a captured copy.
//!
//! Every path is taken relative to a root so tests and operators can point the
//! scan at a fixture; nothing here writes anywhere.

mod attrs;
mod reader;
mod resolve;
mod scan;

pub use reader::{ReadTimings, SysfsReader};
pub use scan::{scan, ScanError, SysfsRoot};
