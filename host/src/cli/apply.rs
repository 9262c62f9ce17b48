//! `p2p-host apply`: hot-adds a VM's GPUs, with their cliques, to a running
//! Cloud Hypervisor through its REST API.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use p2p_host::vmm::ch_api::{add_devices, ApiClient};
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
    if json {
        println!("{}", serde_json::to_string_pretty(&outcomes)?);
    }
    if let Some(bad) = outcomes.iter().find(|o| !(200..300).contains(&o.status)) {
        bail!(
            "Cloud Hypervisor refused {} (id {}, clique {}): HTTP {}{}; {} of {} GPU(s) added",
            bad.device.path,
            bad.device.id,
            bad.device.x_nv_gpudirect_clique,
            bad.status,
            if bad.body.is_empty() {
                String::new()
            } else {
                format!(": {}", bad.body.trim())
            },
            outcomes.len() - 1,
            devices.len()
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
