//! `p2p-host assets --out DIR` (hidden): the man pages and shell completions a
//! package ships, made from this binary's own clap definition.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};

#[derive(Debug, Args)]
pub struct AssetsArgs {
    /// Folder to write man/*.1 and completions/* into (created).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub fn run(args: AssetsArgs) -> anyhow::Result<()> {
    for asset in p2p_report::cli_assets::all(super::Cli::command()) {
        let path = args.out.join(&asset.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        }
        std::fs::write(&path, &asset.bytes).with_context(|| path.display().to_string())?;
        println!("{}", path.display());
    }
    Ok(())
}
