//! The order `dra slices` publishes GPUs in (`--device-order`), which is the
//! order Kubernetes' allocator tries them: on captured trees, the orders
//! worked out by hand from each tree's layout (tests/fixtures/*/capture.txt).

use p2p_allocation::dra::{build_slices, DeviceOrder, SliceOptions, DEFAULT_DRIVER, PCI_BUS_ID};
use p2p_topology::{Bdf, GpuSelector};

use p2p_tests::{TWO_SOCKET_GPUS, TWO_SOCKET_GPUS_NIC_LAST};

use super::dra::{load, tree_dir};

/// The GPUs of `tree` (its `topo.json` list) with `nics` made RDMA NICs, as
/// the fleet stages them, published in `order`: their addresses in slice
/// order, and the NICs'.
fn published(
    tree: &str,
    gpus: &[&str],
    nics: &[&str],
    order: DeviceOrder,
) -> (Vec<String>, Vec<String>) {
    let sel = GpuSelector::List {
        bdfs: gpus.iter().map(|g| g.parse::<Bdf>().unwrap()).collect(),
    };
    let mut topo = load(&tree_dir(tree), &sel);
    for (n, nic) in nics.iter().enumerate() {
        let bdf: Bdf = nic.parse().unwrap();
        let f = topo
            .functions
            .iter_mut()
            .find(|f| f.bdf == bdf)
            .unwrap_or_else(|| panic!("{tree}: no function {nic}"));
        f.rdma_devices = vec![format!("mlx5_{n}")];
    }
    let mut opts = SliceOptions::new("node-a", DEFAULT_DRIVER, &sel);
    opts.bind = true;
    opts.order = order;
    let p = build_slices(&topo, &opts).unwrap();
    let text = |d: &p2p_allocation::dra::Device, name: &str| {
        d.attribute(DEFAULT_DRIVER, name)
            .and_then(|a| a.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let of = |kind: &str| -> Vec<String> {
        p.devices()
            .filter(|d| text(d, "gpu.vp2p.io/kind") == kind)
            .map(|d| text(d, PCI_BUS_ID))
            .collect()
    };
    (of("gpu"), of("nic"))
}

#[test]
fn address_order_is_the_kernels_order() {
    let (gpus, nics) = published(
        "qemu-11.1-two-socket-iommu-on",
        &TWO_SOCKET_GPUS,
        &["0000:25:00.0"],
        DeviceOrder::Address,
    );
    assert_eq!(gpus, TWO_SOCKET_GPUS);
    assert_eq!(nics, ["0000:25:00.0"]);
}

#[test]
fn nic_last_lists_gpus_away_from_the_nic_first_at_every_level() {
    let (gpus, nics) = published(
        "qemu-11.1-two-socket-iommu-on",
        &TWO_SOCKET_GPUS,
        &["0000:25:00.0"],
        DeviceOrder::NicLast,
    );
    assert_eq!(gpus, TWO_SOCKET_GPUS_NIC_LAST);
    assert_eq!(nics, ["0000:25:00.0"]);
}

#[test]
fn nic_last_without_a_nic_is_the_address_order() {
    let (gpus, nics) = published(
        "qemu-11.1-two-socket-iommu-on",
        &TWO_SOCKET_GPUS,
        &[],
        DeviceOrder::NicLast,
    );
    assert_eq!(gpus, TWO_SOCKET_GPUS);
    assert!(nics.is_empty());
}

#[test]
fn nic_last_keeps_each_numa_node_together_where_both_have_a_nic() {
    // qemu-11.1-root-ports: a root port per GPU; NICs 23:00.0 on pci0000:20
    // (node 0) and 83:00.0 on pci0000:80 (node 1); pci0000:40 (node 0) and
    // pci0000:a0 (node 1) have none.
    let (gpus, _) = published(
        "qemu-11.1-root-ports-iommu-on",
        &[
            "0000:21:00.0",
            "0000:22:00.0",
            "0000:41:00.0",
            "0000:42:00.0",
            "0000:81:00.0",
            "0000:82:00.0",
            "0000:a1:00.0",
            "0000:a2:00.0",
        ],
        &["0000:23:00.0", "0000:83:00.0"],
        DeviceOrder::NicLast,
    );
    assert_eq!(
        gpus,
        [
            "0000:41:00.0",
            "0000:42:00.0",
            "0000:21:00.0",
            "0000:22:00.0",
            "0000:a1:00.0",
            "0000:a2:00.0",
            "0000:81:00.0",
            "0000:82:00.0",
        ]
    );
}

#[test]
fn the_order_names_parse_back_and_a_wrong_one_says_which_exist() {
    for o in [DeviceOrder::Address, DeviceOrder::NicLast] {
        assert_eq!(o.name().parse::<DeviceOrder>(), Ok(o));
    }
    let e = "nearest".parse::<DeviceOrder>().unwrap_err().to_string();
    assert!(e.contains("`nearest`") && e.contains("nic-last"), "{e}");
}
