//! `p2p-host snapshot`.

use std::path::PathBuf;

use clap::Args;
use p2p_host::snapshot::snapshot;
use p2p_host::sysfs::SysfsRoot;

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Directory to write; the tree goes to OUT/sysfs (the fixtures' layout).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// sysfs tree to copy.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: SnapshotArgs) -> anyhow::Result<()> {
    let root = SysfsRoot::new(&args.sysfs_root)?;
    let summary = snapshot(&root, &args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "captured {} PCI functions ({} files) from {} into {}",
            summary.functions,
            summary.files,
            root.path().display(),
            summary.out.display()
        );
    }
    if !summary.truncated_configs.is_empty() {
        eprintln!(
            "p2p-host: warning: config space of {} function(s) was truncated to the 64-byte \
             header (not root?): ACS and port types will be unknown in this snapshot",
            summary.truncated_configs.len()
        );
    }
    Ok(())
}
