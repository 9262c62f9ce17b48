//! `p2p-host kubevirt on-define-domain`: the hook KubeVirt's sidecar-shim runs
//! as `onDefineDomain --vmi JSON --domain XML`, taking the new domain from
//! standard output. The policy comes from the VMI's `vp2p.io/` annotations;
//! an error leaves the VM as it was (the domain unchanged, the reason on
//! standard error) unless `vp2p.io/on-error: fail` asks to stop it.
//! [`decide`] is that policy and patch, shared with `kubevirt plugin-hook`
//! (KubeVirt 1.9.0's plugin domain hook, in `kubevirt_plugin.rs`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use p2p_host::vmm::libvirt::FwCfgVia;
use p2p_topology::guest_layout::FirstSlot;
use p2p_topology::select::ClassPrefix;

use super::domain::{patch, DomainPatch, NcclChoice};
use super::kubevirt_plugin::PluginHookArgs;
use super::plan::{parse_level, LayoutArg, PlanArgs};
use super::select::TopologyArgs;

/// The annotations the hook reads, with their values.
pub const ANNOTATIONS: &[(&str, &str)] = &[
    (
        "vp2p.io/max-level",
        "pix | pxb | phb | node | sys (default phb)",
    ),
    ("vp2p.io/guest-topology", "flat | mirror (default flat)"),
    (
        "vp2p.io/nccl-topo",
        "inline | off (default inline with mirror, off with flat)",
    ),
    (
        "vp2p.io/gpu-class",
        "a PCI class prefix such as 0302 (default: NVIDIA display functions)",
    ),
    (
        "vp2p.io/on-error",
        "keep | fail (default keep: the domain passes unchanged)",
    ),
];

/// KubeVirt hooks.
#[derive(Debug, Args)]
pub struct KubevirtArgs {
    #[command(subcommand)]
    hook: Hook,
}

#[derive(Debug, Subcommand)]
enum Hook {
    /// Patch the domain virt-launcher is about to define with the plan for
    /// its GPUs (the sidecar-shim's onDefineDomain).
    OnDefineDomain(OnDefineDomainArgs),
    /// Serve KubeVirt 1.9.0's plugin domain hook (VEP 190,
    /// DomainHookService.MutateDomain) on a unix socket: the same patch as
    /// on-define-domain, for a sidecar that a Plugin object names.
    PluginHook(PluginHookArgs),
}

impl KubevirtArgs {
    /// Whether the hook is a long-running server.
    pub fn is_server(&self) -> bool {
        matches!(self.hook, Hook::PluginHook(_))
    }
}

#[derive(Debug, Args)]
struct OnDefineDomainArgs {
    /// The VirtualMachineInstance as JSON, as the shim passes it.
    #[arg(long, value_name = "JSON")]
    vmi: String,
    /// The libvirt domain XML, as the shim passes it.
    #[arg(long, value_name = "XML")]
    domain: String,
    /// The node's sysfs (the sidecar sees the node's /sys read-only).
    #[arg(
        long,
        value_name = "DIR",
        env = "VP2P_SYSFS_ROOT",
        default_value = "/sys"
    )]
    sysfs_root: PathBuf,
}

/// The hook's policy, from the VMI's annotations.
#[derive(Debug)]
struct Policy {
    plan: PlanArgs,
    nccl: NcclChoice,
}

const WHO: &str = "p2p-host kubevirt on-define-domain";

/// What the hook makes of a VMI and its domain.
pub(super) enum Decision {
    /// The domain patched (or as given, with nothing to do).
    Patched(DomainPatch),
    /// An error, and the VMI keeps its domain unchanged.
    Kept(anyhow::Error),
    /// An error, and the VMI asks (`vp2p.io/on-error: fail`) to stop.
    Failed(anyhow::Error),
}

/// The policy from `vmi`'s annotations (`vmi_source` names the JSON in
/// errors) applied to `domain` with the node's sysfs at `sysfs_root`.
pub(super) fn decide(
    vmi: &str,
    domain: &str,
    sysfs_root: &std::path::Path,
    vmi_source: &str,
) -> Decision {
    let annotations = annotations(vmi, vmi_source);
    // An unreadable on-error annotation cannot ask to fail hard.
    let fail_hard = annotations
        .as_ref()
        .ok()
        .and_then(|m| m.get("vp2p.io/on-error"))
        .is_some_and(|v| v.eq_ignore_ascii_case("fail"));
    let outcome = annotations
        .and_then(|m| policy(&m, sysfs_root))
        .and_then(|p| {
            // virt-launcher keeps the domain in a DomainSpec with one
            // <sysinfo>: a second, fw_cfg one would be merged into its SMBIOS
            // one for the next define. The NCCL file goes on the QEMU command
            // line, which that define keeps (plugins) or the hook adds again
            // (the sidecar path loses it, like the override).
            patch(
                &p.plan,
                domain,
                "the domain from virt-launcher",
                &p.nccl,
                FwCfgVia::Commandline,
            )
        });
    match outcome {
        Ok(patched) => Decision::Patched(patched),
        Err(e) if fail_hard => {
            Decision::Failed(e.context("vp2p.io/on-error is fail: the VM is not defined"))
        }
        Err(e) => Decision::Kept(e),
    }
}

pub fn run(args: KubevirtArgs) -> anyhow::Result<()> {
    let a = match args.hook {
        Hook::OnDefineDomain(a) => a,
        Hook::PluginHook(a) => return super::kubevirt_plugin::run(a),
    };
    match decide(&a.vmi, &a.domain, &a.sysfs_root, "--vmi") {
        Decision::Patched(patched) => {
            print!("{}", patched.text);
            std::io::stdout().flush()?;
            eprint!("{}", patched.report(WHO));
            Ok(())
        }
        Decision::Failed(e) => Err(e),
        Decision::Kept(e) => {
            eprintln!(
                "{WHO}: error: {e:#}\n{WHO}: the domain passes unchanged, without P2P cliques \
                 (annotate the VMI with vp2p.io/on-error: fail to stop it instead)"
            );
            print!("{}", a.domain);
            Ok(())
        }
    }
}

/// `metadata.annotations` of the VMI JSON.
fn annotations(vmi: &str, source: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let v: serde_json::Value = serde_json::from_str(vmi).map_err(|e| {
        anyhow!(
            "{source} is not JSON: {}",
            p2p_topology::excerpt::json_error(&e)
        )
    })?;
    let Some(map) = v.pointer("/metadata/annotations") else {
        return Ok(BTreeMap::new());
    };
    let map = map
        .as_object()
        .ok_or_else(|| anyhow!("{source}: metadata.annotations is not an object"))?;
    Ok(map
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
        .collect())
}

fn policy(ann: &BTreeMap<String, String>, sysfs_root: &std::path::Path) -> anyhow::Result<Policy> {
    for k in ann.keys().filter(|k| k.starts_with("vp2p.io/")) {
        if !ANNOTATIONS.iter().any(|(known, _)| known == k) {
            let names: Vec<&str> = ANNOTATIONS.iter().map(|(n, _)| *n).collect();
            bail!(
                "annotation {k} is not one vp2p reads ({})",
                names.join(", ")
            );
        }
    }
    let get = |k: &str| ann.get(k).map(|v| v.trim().to_ascii_lowercase());
    let bad = |k: &str, v: &str| {
        let values = ANNOTATIONS
            .iter()
            .find(|(n, _)| *n == k)
            .map_or("", |(_, d)| d);
        anyhow!("annotation {k}: '{v}' is not one of {values}")
    };
    let max_level = match get("vp2p.io/max-level") {
        Some(v) => parse_level(&v).map_err(|_| bad("vp2p.io/max-level", &v))?,
        None => parse_level("phb").map_err(|e| anyhow!(e))?,
    };
    let guest_topology = match get("vp2p.io/guest-topology").as_deref() {
        None | Some("flat") => LayoutArg::Flat,
        Some("mirror") => LayoutArg::Mirror,
        Some(v) => return Err(bad("vp2p.io/guest-topology", v)),
    };
    let nccl = match (get("vp2p.io/nccl-topo").as_deref(), guest_topology) {
        (None, LayoutArg::Mirror) | (Some("inline"), _) => NcclChoice::Inline,
        (None, LayoutArg::Flat) | (Some("off"), _) => NcclChoice::Off,
        (Some(v), _) => return Err(bad("vp2p.io/nccl-topo", v)),
    };
    if let Some(v) = get("vp2p.io/on-error") {
        if v != "keep" && v != "fail" {
            return Err(bad("vp2p.io/on-error", &v));
        }
    }
    let gpu_class = match get("vp2p.io/gpu-class") {
        Some(v) => Some(
            v.parse::<ClassPrefix>()
                .map_err(|_| bad("vp2p.io/gpu-class", &v))?,
        ),
        None => None,
    };
    Ok(Policy {
        plan: PlanArgs {
            topology: TopologyArgs {
                sysfs_root: sysfs_root.to_path_buf(),
                gpus: Vec::new(),
                gpu_class,
                nvlinks: Default::default(),
            },
            max_level,
            vms: Vec::new(),
            available: Vec::new(),
            fm_partitions: None,
            strict: false,
            guest_topology,
            first_slot: FirstSlot::DEFAULT,
        },
        nccl,
    })
}
