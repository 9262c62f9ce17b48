//! The trees the slice builder's tests are built on: a builder of
//! in-memory topologies and a hand-built host whose attributes are worked out
//! by hand. Shared by the builder's unit tests (`super`, in p2p-allocation) and
//! the property tests of the tests crate (tests/tests/dra_property.rs, which
//! includes this file by path); both bring the types below into scope.

use super::{AcsState, Bdf, HostBridge, LinkInfo, PciFunction, PciePortType, Topology};

pub const GPU: u32 = 0x030200;
pub const NIC: u32 = 0x020000;
pub const BRIDGE: u32 = 0x060400;
pub const AUDIO: u32 = 0x040300;

/// A topology under construction; each function gets an IOMMU group of its
/// own unless one is given.
pub struct Tree {
    /// The topology so far.
    pub topo: Topology,
    group: u32,
}

impl Tree {
    pub fn new() -> Self {
        Self {
            topo: Topology::default(),
            group: 0,
        }
    }

    pub fn host_bridge(&mut self, bus: u8, numa: Option<u32>) -> String {
        let name = format!("pci0000:{bus:02x}");
        self.topo.host_bridges.push(HostBridge {
            name: name.clone(),
            domain: 0,
            bus,
            numa_node: numa,
        });
        name
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        bdf: Bdf,
        hb: &str,
        parent: Option<Bdf>,
        class: u32,
        port: Option<PciePortType>,
        numa: Option<u32>,
        group: Option<u32>,
        driver: &str,
    ) {
        let group = group.or_else(|| {
            self.group += 1;
            Some(self.group)
        });
        self.topo.functions.push(PciFunction {
            bdf,
            vendor: if class == NIC { 0x15b3 } else { 0x10de },
            device: 0x2335,
            subsystem_vendor: None,
            subsystem_device: None,
            class,
            is_bridge: class == BRIDGE,
            host_bridge: hb.to_string(),
            parent,
            pcie_port_type: port,
            acs: AcsState::Absent,
            iommu_group: group,
            numa_node: numa,
            cpu_affinity: None,
            driver: Some(driver.to_string()),
            link: LinkInfo::default(),
            config_len: 256,
            interfaces: Vec::new(),
            rdma_devices: if class == NIC {
                vec![format!("mlx5_{}", bdf.bus)]
            } else {
                Vec::new()
            },
        });
    }

    /// Root port `rp` on host bridge `hb` (NUMA 0) with a GPU `ep` on
    /// vfio-pci below it.
    pub fn gpu_on_root_port(&mut self, hb: &str, rp: Bdf, ep: Bdf) {
        use PciePortType::*;
        let n = Some(0);
        self.add(rp, hb, None, BRIDGE, Some(RootPort), n, None, "pcieport");
        self.add(ep, hb, Some(rp), GPU, Some(Endpoint), n, None, "vfio-pci");
    }

    pub fn done(mut self) -> Topology {
        self.topo.sort();
        self.topo
    }
}

pub fn b(s: &str) -> Bdf {
    s.parse().unwrap()
}

/// Host bridge pci0000:00 (NUMA 0): root port 00:01.0 -> switch (up 01:00.0,
/// downs 02:00.0, 02:01.0, 02:02.0) with GPU 03:00.0 (+ audio 03:00.1 in its
/// group), GPU 04:00.0 and NIC 05:00.0; root port 00:02.0 -> GPU 10:00.0 and
/// GPU 10:00.1 sharing IOMMU group 99. Host bridge pci0000:80 (NUMA unknown):
/// root port 80:01.0 -> GPU 81:00.0 bound to nvidia.
pub fn hand_built() -> Topology {
    use PciePortType::*;
    let mut t = Tree::new();
    let hb = t.host_bridge(0x00, Some(0));
    let n = Some(0);
    t.add(
        b("00:01.0"),
        &hb,
        None,
        BRIDGE,
        Some(RootPort),
        n,
        None,
        "pcieport",
    );
    t.add(
        b("01:00.0"),
        &hb,
        Some(b("00:01.0")),
        BRIDGE,
        Some(SwitchUpstream),
        n,
        None,
        "pcieport",
    );
    for (i, ep) in ["03:00.0", "04:00.0", "05:00.0"].iter().enumerate() {
        let down = b(&format!("02:{i:02x}.0"));
        t.add(
            down,
            &hb,
            Some(b("01:00.0")),
            BRIDGE,
            Some(SwitchDownstream),
            n,
            None,
            "pcieport",
        );
        let class = if i == 2 { NIC } else { GPU };
        let group = (i == 0).then_some(50);
        t.add(
            b(ep),
            &hb,
            Some(down),
            class,
            Some(Endpoint),
            n,
            group,
            "vfio-pci",
        );
    }
    t.add(
        b("03:00.1"),
        &hb,
        Some(b("02:00.0")),
        AUDIO,
        Some(Endpoint),
        n,
        Some(50),
        "vfio-pci",
    );
    t.add(
        b("00:02.0"),
        &hb,
        None,
        BRIDGE,
        Some(RootPort),
        n,
        None,
        "pcieport",
    );
    for f in ["10:00.0", "10:00.1"] {
        t.add(
            b(f),
            &hb,
            Some(b("00:02.0")),
            GPU,
            Some(Endpoint),
            n,
            Some(99),
            "vfio-pci",
        );
    }
    let hb2 = t.host_bridge(0x80, None);
    t.add(
        b("80:01.0"),
        &hb2,
        None,
        BRIDGE,
        Some(RootPort),
        None,
        None,
        "pcieport",
    );
    t.add(
        b("81:00.0"),
        &hb2,
        Some(b("80:01.0")),
        GPU,
        Some(Endpoint),
        None,
        None,
        "nvidia",
    );
    t.done()
}
