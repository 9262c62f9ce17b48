//! `p2p-host apply`: hot-adds a VM's GPUs, with their cliques, to a running
//! Cloud Hypervisor through its REST API.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use p2p_host::vmm::ch_api::{add_devices, remove_devices, AddOutcome, ApiClient, RemoveOutcome};
use p2p_host::vmm::cloud_hypervisor::device_configs;

use super::plan::PlanArgs;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Cloud Hypervisor's API socket (its --api-socket path).
    #[arg(long, value_name = "PATH")]
    api_socket: PathBuf,
    #[command(flatten)]
    plan: PlanArgs,
    /// Print the answers as JSON.
    #[arg(long)]
    json: bool,
    /// When a hot-add is refused, keep the GPUs this run already added
    /// (default: remove them again, so the VM is as it was).
    #[arg(long)]
    keep_partial: bool,
}

/// What `--json` prints: every add, and every removal a refusal caused.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct ApplyReport<'a> {
    schema: &'static str,
    added: &'a [AddOutcome],
    rolled_back: &'a [RemoveOutcome],
}

pub fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let report = args.plan.plan()?;
    let [plan] = report.vms.as_slice() else {
        bail!("apply drives one VM: give at most one --vm");
    };
    let devices = device_configs(plan);
    let client = ApiClient::new(&args.api_socket);
    let json = args.json;
    let outcomes = add_devices(&client, &devices, |o| {
        if !json {
            let body = if o.body.is_empty() {
                String::new()
            } else {
                format!(" {}", o.body.trim())
            };
            println!(
                "{} clique {} -> {}{}",
                o.device.path, o.device.x_nv_gpudirect_clique, o.status, body
            );
        }
    })?;
    let refused = outcomes.iter().find(|o| !(200..300).contains(&o.status));
    // All or nothing: a refusal removes what this run added, newest first.
    let added_ids: Vec<String> = outcomes
        .iter()
        .filter(|o| (200..300).contains(&o.status))
        .map(|o| o.device.id.clone())
        .collect();
    let rolled_back = match refused {
        Some(_) if !args.keep_partial && !added_ids.is_empty() => {
            remove_devices(&client, &added_ids)?
        }
        _ => Vec::new(),
    };
    if json {
        let report = ApplyReport {
            schema: "vp2p.apply/1",
            added: &outcomes,
            rolled_back: &rolled_back,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for r in &rolled_back {
            println!("removed {} again -> {}", r.id, r.status);
        }
    }
    if let Some(bad) = refused {
        let undone = rolled_back
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .count();
        let left = if added_ids.is_empty() {
            "no GPU was added".to_string()
        } else if args.keep_partial {
            format!(
                "{} of {} GPU(s) added and kept (--keep-partial)",
                added_ids.len(),
                devices.len()
            )
        } else if undone == added_ids.len() {
            format!(
                "{} GPU(s) added before it removed again: the VM is as it was",
                added_ids.len()
            )
        } else {
            format!(
                "{} GPU(s) added before it, {undone} removed again: {} still in the VM",
                added_ids.len(),
                added_ids.len() - undone
            )
        };
        bail!(
            "Cloud Hypervisor refused {} (id {}, clique {}): HTTP {}{}; {left}",
            bad.device.path,
            bad.device.id,
            bad.device.x_nv_gpudirect_clique,
            bad.status,
            if bad.body.is_empty() {
                String::new()
            } else {
                format!(": {}", bad.body.trim())
            },
        );
    }
    if !json {
        println!(
            "added {} GPU(s) to the VM behind {} (the VM needs vfio_p2p_dma on, the API's default)",
            outcomes.len(),
            args.api_socket.display()
        );
    }
    Ok(())
}
