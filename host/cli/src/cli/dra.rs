//! `p2p-host dra`: the Dynamic Resource Allocation side. `dra slices` prints,
//! without a cluster and without an async runtime, the ResourceSlices
//! (`resource.k8s.io/v1`) the vp2p DRA driver would publish for this node;
//! `dra driver` runs the driver's kubelet plugin (p2p_host_kube::dra_driver, the
//! one command here that starts a runtime). Both read the tree the same way
//! (the scan, NVLinks, Fabric Manager's partitions), so the driver publishes
//! what `dra slices` prints.

use std::path::PathBuf;

use std::sync::Arc;

use clap::{Args, Subcommand};
use p2p_allocation::dra::{build_slices, DeviceOrder, SliceOptions, DEFAULT_DRIVER};
use p2p_report::TextReport;
use serde_json::json;

use super::select::TopologyArgs;

#[derive(Debug, Args)]
pub struct DraArgs {
    #[command(subcommand)]
    command: DraCommand,
}

impl DraArgs {
    /// Whether this is the long-running driver (not `slices`).
    pub fn is_server(&self) -> bool {
        matches!(
            self.command,
            DraCommand::Driver(_) | DraCommand::Extender(_)
        )
    }
}

#[derive(Debug, Subcommand)]
enum DraCommand {
    /// Print the ResourceSlices the DRA driver would publish for this node:
    /// one device per GPU and RDMA NIC VFIO can assign alone, with the
    /// standard PCI attributes and a clique attribute per level (equal value:
    /// the pair may be peers); a table, or the objects with --json / --yaml.
    Slices(SlicesArgs),
    /// Run the DRA driver's kubelet plugin: register with the kubelet's
    /// plugin watcher, serve DRAPlugin v1 and v1beta1, and prepare claims of
    /// this node's devices (IOMMU groups on vfio-pci, a CDI spec and the
    /// KEP-5304 device metadata, a checkpoint) until SIGTERM.
    Driver(DriverArgs),
    /// Run a kube-scheduler extender (prioritize verb) that scores each
    /// feasible node by the nearest level vp2p's free devices there offer a
    /// pod's claims, and by whether the placement costs the node a larger VM
    /// (docs/kubevirt.md, "Scheduler extender").
    Extender(ExtenderArgs),
}

#[derive(Debug, Args)]
pub struct ExtenderArgs {
    /// Address to listen on (the scheduler's `urlPrefix`: http://ADDR).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8888")]
    listen: std::net::SocketAddr,
    /// kubeconfig [default: in cluster, or the default kubeconfig].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// vp2p's driver name: the slices and allocations read.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DRIVER)]
    driver_name: String,
    /// The DeviceClass of vp2p's GPUs, as the claims name it.
    #[arg(long, value_name = "CLASS", default_value = "vp2p-gpu")]
    gpu_device_class: String,
    /// The DeviceClass of vp2p's NICs.
    #[arg(long, value_name = "CLASS", default_value = "vp2p-nic")]
    nic_device_class: String,
    /// Each request to the API server may take this long.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    api_timeout_ms: u64,
    /// Score only pods with this label (repeatable: any of them); every
    /// pod when not given. Other pods get 0 on every node.
    #[arg(long, value_name = "KEY=VALUE")]
    pod_label: Vec<String>,
    /// A larger VM to leave room for (repeatable): GPUs, +nic when it takes
    /// a NIC. A node where a pod's devices would cost the room for one of
    /// these scores a point less. The default is the shipped templates'.
    #[arg(long, value_name = "ASK", default_values = ["4+nic", "8"])]
    keep: Vec<p2p_allocation::dra::score::Ask>,
}

#[derive(Debug, Args)]
pub struct DriverArgs {
    /// sysfs tree to read and bind in.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    sysfs_root: PathBuf,
    /// Treat functions of this class as GPUs, any vendor (2, 4 or 6 hex
    /// digits); NVIDIA display controllers otherwise.
    #[arg(long, value_name = "PREFIX")]
    gpu_class: Option<p2p_topology::select::ClassPrefix>,
    #[command(flatten)]
    nvlinks: super::select::NvLinkArgs,
    /// Fabric Manager's partition list (`fmpm -l` output): an
    /// fmPartition<N> attribute per partition size. Read again when it
    /// changes (looked at with the devices, every --resync-ms).
    #[arg(long, value_name = "FILE")]
    fm_partitions: Option<PathBuf>,
    /// The node's name (the pool the claims' devices are in).
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    node_name: String,
    /// The driver's name.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DRIVER)]
    driver_name: String,
    /// The kubelet's root directory: the registration socket goes in its
    /// plugins_registry/, the DRA socket and the checkpoint in
    /// plugins/<driver>/.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/kubelet")]
    kubelet_root: PathBuf,
    /// The registration socket [default: <kubelet-root>/plugins_registry/<driver>-reg.sock].
    #[arg(long, value_name = "PATH")]
    registration_socket: Option<PathBuf>,
    /// The DRA socket [default: <kubelet-root>/plugins/<driver>/dra.sock].
    #[arg(long, value_name = "PATH")]
    dra_socket: Option<PathBuf>,
    /// The checkpoint file [default: <kubelet-root>/plugins/<driver>/checkpoint.json].
    #[arg(long, value_name = "PATH")]
    checkpoint: Option<PathBuf>,
    /// Where CDI specs are written.
    #[arg(long, value_name = "DIR", default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// Where device metadata files are written on the host (bind-mounted
    /// into containers by the CDI spec).
    #[arg(long, value_name = "DIR", default_value = "/var/run/vp2p/dra-metadata")]
    metadata_dir: PathBuf,
    /// Read claims from <DIR>/<namespace>/<name>.json (ResourceClaim objects
    /// as the API server serves them) and publish nothing: a node without
    /// the API server. Without it claims are read from the API server and
    /// the node's ResourceSlices published there.
    #[arg(long, value_name = "DIR")]
    claims_dir: Option<PathBuf>,
    /// The kubeconfig to reach the API server with; in a pod the service
    /// account's credentials are used without it.
    #[arg(long, value_name = "FILE", env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// How often the node's devices are checked for changes (a change is
    /// published as a new pool generation), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    resync_ms: u64,
    /// How often the API server's copy of the slices is compared with what
    /// was published (a LIST) when no event of the slices' watch asked
    /// sooner, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    verify_ms: u64,
    /// The order GPUs are published in, which is the order the scheduler's
    /// allocator tries them: `nic-last` (GPUs whose NUMA node, root complex
    /// or switch holds no NIC first, so claims without a NIC leave the NICs'
    /// neighbours free; docs/fleet.md measures it) or `address`.
    #[arg(long, value_name = "ORDER", default_value_t = DeviceOrder::default())]
    device_order: DeviceOrder,
    /// Bind every endpoint of a claimed device's IOMMU group to vfio-pci at
    /// prepare (driver_override), and give them back at unprepare; without
    /// it a group not wholly on vfio-pci is refused.
    #[arg(long)]
    bind: bool,
    /// Give containers /dev/iommu and /dev/vfio/devices/vfioN (iommufd)
    /// instead of /dev/vfio/vfio and /dev/vfio/<group>.
    #[arg(long)]
    iommufd: bool,
    /// How long a bind may take to show in sysfs, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    bind_timeout_ms: u64,
    /// How long one API server request may take, in milliseconds (a claim's
    /// read at prepare takes less when the kubelet's deadline is nearer).
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    api_timeout_ms: u64,
    /// Serve the gRPC health service (grpc.health.v1) the kubelet's probes
    /// ask on this TCP port: `liveness` while both plugin sockets answer,
    /// `readiness` once the kubelet registered the plugin and the slices are
    /// published.
    #[arg(long, value_name = "PORT")]
    healthcheck_port: Option<u16>,
    /// Start from a checkpoint that does not read (damaged, or of another
    /// version): give back what it still records (functions to their
    /// drivers, CDI specs, device metadata), move it aside as
    /// <checkpoint>.recovered-<time> and start with an empty one. Drain the
    /// node first.
    #[arg(long)]
    recover: bool,
    /// Serve the driver's metrics in Prometheus' text format at /metrics on
    /// this TCP port: claims prepared and unprepared by result, their
    /// latency, the devices published.
    #[arg(long, value_name = "PORT")]
    metrics_port: Option<u16>,
    /// Delete this node's ResourceSlices of the driver from the API server
    /// and exit (uninstall: a stopped driver leaves them published).
    #[arg(long, conflicts_with = "claims_dir")]
    remove_slices: bool,
}

#[derive(Debug, Args)]
pub struct SlicesArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    /// The node's name (the pool's name and the slices' nodeName).
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    node_name: String,
    /// The driver's name, also the domain of vp2p's own attributes.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_DRIVER)]
    driver_name: String,
    /// Fabric Manager's partition list (`fmpm -l` output): an
    /// fmPartition<N> attribute per partition size.
    #[arg(long, value_name = "FILE")]
    fm_partitions: Option<PathBuf>,
    /// The order GPUs are published in, which is the order the scheduler's
    /// allocator tries them: `nic-last` (GPUs whose NUMA node, root complex
    /// or switch holds no NIC first, so claims without a NIC leave the NICs'
    /// neighbours free; docs/fleet.md measures it) or `address`.
    #[arg(long, value_name = "ORDER", default_value_t = DeviceOrder::default())]
    device_order: DeviceOrder,
    /// Publish GPUs and NICs not bound to vfio-pci yet (the driver started
    /// with --bind binds them at prepare); without it they are left out.
    #[arg(long)]
    bind: bool,
    /// Print the objects as JSON: a v1 List of ResourceSlices (`kubectl
    /// apply -f` takes it); left-out devices go to stderr.
    #[arg(long, conflicts_with = "yaml")]
    json: bool,
    /// Print the objects as YAML, one document per ResourceSlice (in JSON's
    /// flow style, so every string is quoted).
    #[arg(long)]
    yaml: bool,
}

pub fn run(args: DraArgs) -> anyhow::Result<()> {
    match args.command {
        DraCommand::Slices(a) => slices(a),
        DraCommand::Driver(a) => driver(a),
        DraCommand::Extender(a) => extender(a),
    }
}

fn extender(a: ExtenderArgs) -> anyhow::Result<()> {
    let pod_labels = a
        .pod_label
        .iter()
        .map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| anyhow::anyhow!("--pod-label {l}: not KEY=VALUE"))
        })
        .collect::<anyhow::Result<_>>()?;
    p2p_host_kube::extender::run(p2p_host_kube::extender::Settings {
        pod_labels,
        keep: a.keep,
        listen: a.listen,
        kubeconfig: a.kubeconfig,
        driver: a.driver_name,
        gpu_class: a.gpu_device_class,
        nic_class: a.nic_device_class,
        timeout: std::time::Duration::from_millis(a.api_timeout_ms.max(1)),
    })?;
    Ok(())
}

fn driver(args: DriverArgs) -> anyhow::Result<()> {
    use p2p_host_kube::dra_driver::{Settings, Source};
    if args.remove_slices {
        let n = p2p_host_kube::dra_driver::remove_slices(
            args.kubeconfig.as_deref(),
            std::time::Duration::from_millis(args.api_timeout_ms.max(1)),
            &args.node_name,
            &args.driver_name,
        )?;
        println!(
            "removed {n} ResourceSlice(s) of {} on node {}",
            args.driver_name, args.node_name
        );
        return Ok(());
    }
    let selector = match args.gpu_class {
        Some(prefix) => p2p_topology::GpuSelector::Class { prefix },
        None => p2p_topology::GpuSelector::Nvidia,
    };
    let reader = Arc::new(args.nvlinks.reader(selector.clone()));
    let mut s = Settings::new(
        &args.node_name,
        &args.driver_name,
        &args.kubelet_root,
        reader,
    );
    s.sysfs_root = args.sysfs_root;
    s.selector = selector;
    s.partitions = match &args.fm_partitions {
        Some(path) => Some(Arc::new(
            p2p_host_kube::dra_driver::fm_partitions::FmPartitionsFile::open(path, s.plugin.log)
                .map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    s.bind = args.bind;
    s.order = args.device_order;
    s.iommufd = args.iommufd;
    s.cdi_dir = args.cdi_dir;
    s.metadata_dir = args.metadata_dir;
    s.bind_timeout = std::time::Duration::from_millis(args.bind_timeout_ms);
    s.recover = args.recover;
    s.plugin.api_timeout = std::time::Duration::from_millis(args.api_timeout_ms.max(1));
    s.plugin.healthcheck_port = args.healthcheck_port;
    s.plugin.metrics_port = args.metrics_port;
    if let Some(p) = args.registration_socket {
        s.plugin.registration_socket = p;
    }
    if let Some(p) = args.dra_socket {
        s.plugin.dra_socket = p;
    }
    if let Some(p) = args.checkpoint {
        s.plugin.checkpoint = p;
    }
    let source = match args.claims_dir {
        Some(dir) => Source::Dir(dir),
        None => Source::Cluster {
            kubeconfig: args.kubeconfig,
            resync: std::time::Duration::from_millis(args.resync_ms.max(1)),
            verify: std::time::Duration::from_millis(args.verify_ms.max(1)),
        },
    };
    p2p_host_kube::dra_driver::run(s, source)?;
    Ok(())
}

fn slices(args: SlicesArgs) -> anyhow::Result<()> {
    let (_root, topo, selector) = args.topology.load()?;
    let partitions = super::select::read_fm_partitions(args.fm_partitions.as_deref())?;
    let mut opts = SliceOptions::new(&args.node_name, &args.driver_name, &selector);
    opts.partitions = partitions.as_deref();
    opts.bind = args.bind;
    opts.order = args.device_order;
    let publication = build_slices(&topo, &opts)?;
    if args.json || args.yaml {
        for l in &publication.left_out {
            eprintln!("p2p-host: left out {} ({}): {}", l.bdf, l.kind, l.reason);
        }
        for n in &publication.notes {
            eprintln!("p2p-host: note: {n}");
        }
    }
    if args.json {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": publication.slices});
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else if args.yaml {
        // Each document in JSON's flow style, which is YAML: every string
        // quoted. Block YAML leaves `0000:21:00.0` bare, and YAML 1.1 readers
        // (PyYAML, kubernetes-validate) take that for the sexagesimal 1260.
        for s in &publication.slices {
            println!("---\n{}", serde_json::to_string_pretty(s)?);
        }
    } else {
        print!("{}", publication.render_text());
    }
    Ok(())
}
