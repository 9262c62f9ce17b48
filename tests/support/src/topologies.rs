//! Topologies built in memory, for tests and benches that need hosts the
//! captured fixtures do not have: one function constructor and one tree
//! builder under every hand-built host, the generated HGX-like host of the
//! scale benches and pictures, and the hosts whose expected answers tests
//! work out by hand.

use p2p_topology::pci::{Acs, AcsFlags, PciePortType};
use p2p_topology::topology::{
    AcsState, HostBridge, LinkInfo, NumaNode, NvLink, NvLinkSource, PciFunction, Topology,
};
use p2p_topology::{Bdf, IommuGroup};

/// Class code of a 3D controller (the H100/H200's).
pub const GPU: u32 = 0x030200;
/// Class code of an Ethernet controller.
pub const NIC: u32 = 0x020000;
/// Class code of an InfiniBand controller (ConnectX in IB mode).
pub const IB_NIC: u32 = 0x020700;
/// Class code of a PCI-to-PCI bridge.
pub const BRIDGE: u32 = 0x060400;
/// Class code of an HD audio function (a GPU's second function).
pub const AUDIO: u32 = 0x040300;

/// `s` as a bus address (`0000:03:00.0` or `03:00.0`); panics on a typo.
pub fn bdf(s: &str) -> Bdf {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} is not a bus address: {e}"))
}

/// A function of class `class` at `bdf` below `parent` on host bridge `hb`:
/// NVIDIA H200 ids, a bridge when the class is a bridge's, 256 bytes of
/// config space, and nothing else known (no group, NUMA node, driver, link,
/// ACS, NICs). Tests set the fields they care about.
pub fn function(
    bdf: Bdf,
    hb: &str,
    parent: Option<Bdf>,
    class: u32,
    port: Option<PciePortType>,
) -> PciFunction {
    PciFunction {
        bdf,
        vendor: 0x10de,
        device: 0x2335,
        subsystem_vendor: None,
        subsystem_device: None,
        class,
        is_bridge: class >> 8 == BRIDGE >> 8,
        host_bridge: hb.to_string(),
        parent,
        pcie_port_type: port,
        acs: AcsState::Absent,
        iommu_group: None,
        numa_node: None,
        cpu_affinity: None,
        driver: None,
        link: LinkInfo::default(),
        config_len: 256,
        interfaces: Vec::new(),
        rdma_devices: Vec::new(),
    }
}

/// [`function`] from text: a GPU when `port` is an endpoint, else a bridge
/// (the classification tests' functions, which only their places tell apart).
pub fn by_port(addr: &str, hb: &str, parent: Option<&str>, port: PciePortType) -> PciFunction {
    let class = if port == PciePortType::Endpoint {
        GPU
    } else {
        BRIDGE
    };
    function(bdf(addr), hb, parent.map(bdf), class, Some(port))
}

/// Host bridge `name` on bus `bus` of domain 0, on NUMA node `node`.
pub fn host_bridge(name: &str, bus: u8, node: Option<u32>) -> HostBridge {
    HostBridge {
        name: name.into(),
        domain: 0,
        bus,
        numa_node: node,
    }
}

/// ACS with every P2P control capable (0x1f), Request Redirect and the rest
/// on when `on`, all off otherwise.
pub fn acs_rr(on: bool) -> AcsState {
    let caps = AcsFlags::from_bits(0x1f);
    AcsState::Present(Acs {
        offset: 0x148,
        capability: caps,
        control: if on { caps } else { AcsFlags::default() },
    })
}

/// A topology under construction; each function gets an IOMMU group of its
/// own unless one is given.
#[derive(Debug, Default)]
pub struct Tree {
    /// The topology so far.
    pub topo: Topology,
    group: u32,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds host bridge `pci0000:<bus>` on NUMA node `numa`; its name.
    pub fn host_bridge(&mut self, bus: u8, numa: Option<u32>) -> String {
        let name = format!("pci0000:{bus:02x}");
        self.topo.host_bridges.push(host_bridge(&name, bus, numa));
        name
    }

    /// The next IOMMU group number.
    pub fn next_group(&mut self) -> IommuGroup {
        self.group += 1;
        IommuGroup(self.group)
    }

    /// Adds a function bound to `driver`, in IOMMU group `group` (a new
    /// one when None): a NIC gets Mellanox's vendor id and an RDMA device
    /// named after its bus.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        bdf: Bdf,
        hb: &str,
        parent: Option<Bdf>,
        class: u32,
        port: Option<PciePortType>,
        numa: Option<u32>,
        group: Option<IommuGroup>,
        driver: &str,
    ) -> &mut PciFunction {
        let group = group.unwrap_or_else(|| self.next_group());
        let mut f = function(bdf, hb, parent, class, port);
        f.iommu_group = Some(group);
        f.numa_node = numa;
        f.driver = Some(driver.to_string());
        if class == NIC {
            f.vendor = 0x15b3;
            f.rdma_devices = vec![format!("mlx5_{}", bdf.bus)];
        }
        self.topo.functions.push(f);
        self.topo.functions.last_mut().expect("just pushed")
    }

    /// Root port `rp` on host bridge `hb` (NUMA 0) with a GPU `ep` on
    /// vfio-pci below it.
    pub fn gpu_on_root_port(&mut self, hb: &str, rp: Bdf, ep: Bdf) {
        use PciePortType::*;
        let n = Some(0);
        self.add(rp, hb, None, BRIDGE, Some(RootPort), n, None, "pcieport");
        self.add(ep, hb, Some(rp), GPU, Some(Endpoint), n, None, "vfio-pci");
    }

    /// The topology, sorted.
    pub fn done(mut self) -> Topology {
        self.topo.sort();
        self.topo
    }
}

/// Host bridge pci0000:00 (NUMA 0): root port 00:01.0 -> switch (up 01:00.0,
/// downs 02:00.0, 02:01.0, 02:02.0) with GPU 03:00.0 (+ audio 03:00.1 in its
/// group), GPU 04:00.0 and NIC 05:00.0; root port 00:02.0 -> GPU 10:00.0 and
/// GPU 10:00.1 sharing IOMMU group 99. Host bridge pci0000:80 (NUMA unknown):
/// root port 80:01.0 -> GPU 81:00.0 bound to nvidia. The DRA slices' hand-worked
/// host.
pub fn hand_built() -> Topology {
    use PciePortType::*;
    let mut t = Tree::new();
    let hb = t.host_bridge(0x00, Some(0));
    let n = Some(0);
    let port = |t: &mut Tree, f: &str, parent: Option<&str>, kind| {
        t.add(
            bdf(f),
            &hb,
            parent.map(bdf),
            BRIDGE,
            Some(kind),
            n,
            None,
            "pcieport",
        );
    };
    port(&mut t, "00:01.0", None, RootPort);
    port(&mut t, "01:00.0", Some("00:01.0"), SwitchUpstream);
    for (i, ep) in ["03:00.0", "04:00.0", "05:00.0"].iter().enumerate() {
        let down = format!("02:{i:02x}.0");
        port(&mut t, &down, Some("01:00.0"), SwitchDownstream);
        let class = if i == 2 { NIC } else { GPU };
        let group = (i == 0).then_some(IommuGroup(50));
        t.add(
            bdf(ep),
            &hb,
            Some(bdf(&down)),
            class,
            Some(Endpoint),
            n,
            group,
            "vfio-pci",
        );
    }
    t.add(
        bdf("03:00.1"),
        &hb,
        Some(bdf("02:00.0")),
        AUDIO,
        Some(Endpoint),
        n,
        Some(IommuGroup(50)),
        "vfio-pci",
    );
    port(&mut t, "00:02.0", None, RootPort);
    for f in ["10:00.0", "10:00.1"] {
        t.add(
            bdf(f),
            &hb,
            Some(bdf("00:02.0")),
            GPU,
            Some(Endpoint),
            n,
            Some(IommuGroup(99)),
            "vfio-pci",
        );
    }
    let hb2 = t.host_bridge(0x80, None);
    t.add(
        bdf("80:01.0"),
        &hb2,
        None,
        BRIDGE,
        Some(RootPort),
        None,
        None,
        "pcieport",
    );
    t.add(
        bdf("81:00.0"),
        &hb2,
        Some(bdf("80:01.0")),
        GPU,
        Some(Endpoint),
        None,
        None,
        "nvidia",
    );
    t.done()
}

/// Socket 0: pci0000:00 with root port 00:01.0 -> switch 01:00.0 -> DSPs
/// 02:00.0, 02:01.0, 02:02.0; GPUs 03:00.0 and 04:00.0 below the first two;
/// below the third a second switch 05:00.0 -> DSP 06:00.0 -> GPU 07:00.0.
/// Root port 00:02.0 -> GPU 08:00.0. pci0000:20 (also socket 0): root port
/// 20:01.0 -> GPU 21:00.0. Socket 1: pci0000:80, root port 80:01.0 -> GPU
/// 81:00.0. No IOMMU groups, drivers or NUMA nodes on the functions: the
/// classification tests' server.
pub fn server() -> Topology {
    use PciePortType::*;
    let f = by_port;
    let mut t = Topology {
        host_bridges: vec![
            host_bridge("pci0000:00", 0x00, Some(0)),
            host_bridge("pci0000:20", 0x20, Some(0)),
            host_bridge("pci0000:80", 0x80, Some(1)),
        ],
        functions: vec![
            f("0000:00:01.0", "pci0000:00", None, RootPort),
            f(
                "0000:01:00.0",
                "pci0000:00",
                Some("0000:00:01.0"),
                SwitchUpstream,
            ),
            f(
                "0000:02:00.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            f(
                "0000:02:01.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            f(
                "0000:02:02.0",
                "pci0000:00",
                Some("0000:01:00.0"),
                SwitchDownstream,
            ),
            f("0000:03:00.0", "pci0000:00", Some("0000:02:00.0"), Endpoint),
            f("0000:04:00.0", "pci0000:00", Some("0000:02:01.0"), Endpoint),
            f(
                "0000:05:00.0",
                "pci0000:00",
                Some("0000:02:02.0"),
                SwitchUpstream,
            ),
            f(
                "0000:06:00.0",
                "pci0000:00",
                Some("0000:05:00.0"),
                SwitchDownstream,
            ),
            f("0000:07:00.0", "pci0000:00", Some("0000:06:00.0"), Endpoint),
            f("0000:00:02.0", "pci0000:00", None, RootPort),
            f("0000:08:00.0", "pci0000:00", Some("0000:00:02.0"), Endpoint),
            f("0000:20:01.0", "pci0000:20", None, RootPort),
            f("0000:21:00.0", "pci0000:20", Some("0000:20:01.0"), Endpoint),
            f("0000:80:01.0", "pci0000:80", None, RootPort),
            f("0000:81:00.0", "pci0000:80", Some("0000:80:01.0"), Endpoint),
        ],
        ..Default::default()
    };
    t.sort();
    t
}

/// The generated HGX-like host: `sockets` sockets (NUMA 0, 1, ...) x
/// `bridges` host bridges x 2 PCIe switches, each switch with 2 GPUs and 2
/// RDMA NICs on its own downstream ports, every function in its own IOMMU
/// group: GPU pairs are PIX (one switch), PHB (one host bridge), NODE and
/// SYS. 8 GPUs and 8 NICs for (1, 2), 16 and 16 for (2, 2).
pub fn hgx(sockets: u8, bridges: u8) -> Topology {
    use PciePortType::*;
    let mut t = Tree::new();
    for socket in 0..sockets {
        let n = Some(u32::from(socket));
        for hbi in 0..bridges {
            let root_bus = socket * 0x80 + hbi * 0x40;
            let hb = t.host_bridge(root_bus, n);
            for sw in 0..2u8 {
                let base = root_bus + 1 + sw * 0x10;
                let rp = Bdf::new(0, root_bus, 1 + sw, 0).expect("a valid address");
                let up = Bdf::new(0, base, 0, 0).expect("a valid address");
                t.add(rp, &hb, None, BRIDGE, Some(RootPort), n, None, "");
                t.add(up, &hb, Some(rp), BRIDGE, Some(SwitchUpstream), n, None, "");
                for port in 0..4u8 {
                    let down = Bdf::new(0, base + 1, port, 0).expect("a valid address");
                    let ep = Bdf::new(0, base + 2 + port, 0, 0).expect("a valid address");
                    t.add(
                        down,
                        &hb,
                        Some(up),
                        BRIDGE,
                        Some(SwitchDownstream),
                        n,
                        None,
                        "",
                    );
                    if port < 2 {
                        t.add(ep, &hb, Some(down), GPU, Some(Endpoint), n, None, "");
                    } else {
                        let rdma = format!("mlx5_{}", t.topo.functions.len());
                        t.add(ep, &hb, Some(down), NIC, Some(Endpoint), n, None, "")
                            .rdma_devices = vec![rdma];
                    }
                }
            }
        }
    }
    // No driver is known: what binds them is the test's to say.
    for f in &mut t.topo.functions {
        f.driver = None;
    }
    t.done()
}

/// [`hgx`] of two sockets as a real board shows it: every link x16 at 32
/// GT/s, 4096 bytes of config space, ACS on the switches' downstream ports,
/// bridges on pcieport, GPUs on vfio-pci, the NICs ConnectX-7s in InfiniBand
/// mode on mlx5_core, the NUMA nodes' CPU lists, and NV18 between every pair
/// of each 8-GPU baseboard (an operator's NVLink map), as on the H200s.
pub fn hgx_board() -> Topology {
    let mut t = hgx(2, 2);
    let link = LinkInfo {
        current_speed: Some("32.0 GT/s PCIe".into()),
        current_width: Some(16),
        max_speed: Some("32.0 GT/s PCIe".into()),
        max_width: Some(16),
    };
    for f in &mut t.functions {
        f.link = link.clone();
        f.config_len = 4096;
        f.driver = Some(
            match f.class {
                BRIDGE => "pcieport",
                GPU => "vfio-pci",
                _ => "mlx5_core",
            }
            .into(),
        );
        if f.class == NIC {
            f.class = IB_NIC;
            f.device = 0x1021;
        }
        if f.pcie_port_type == Some(PciePortType::SwitchDownstream) {
            f.acs = AcsState::Present(Acs {
                offset: 0x148,
                capability: AcsFlags::from_bits(0x5f),
                control: AcsFlags::from_bits(0x1d),
            });
        }
    }
    t.numa_nodes = vec![
        NumaNode {
            id: 0,
            cpulist: "0-55,112-167".into(),
        },
        NumaNode {
            id: 1,
            cpulist: "56-111,168-223".into(),
        },
    ];
    let gpus: Vec<Bdf> = t
        .functions
        .iter()
        .filter(|f| f.class == GPU)
        .map(|f| f.bdf)
        .collect();
    for board in gpus.chunks(8) {
        for (i, a) in board.iter().enumerate() {
            for b in &board[i + 1..] {
                t.nvlinks.push(NvLink {
                    a: *a,
                    b: *b,
                    count: Some(18),
                });
            }
        }
    }
    t.nvlink_source = Some(NvLinkSource::OperatorMap);
    t
}
