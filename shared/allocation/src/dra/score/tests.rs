use super::*;
use std::collections::BTreeMap;

const D: &str = "gpu.vp2p.io";

fn dev(name: &str, kind: &str, attrs: &[(&str, &str)]) -> Device {
    let mut a = BTreeMap::new();
    a.insert(
        format!("{D}/kind"),
        DeviceAttribute::String(kind.to_string()),
    );
    for (k, v) in attrs {
        let value = match v.parse::<i64>() {
            Ok(i) => DeviceAttribute::Int(i),
            Err(_) => DeviceAttribute::String(v.to_string()),
        };
        a.insert(format!("{D}/{k}"), value);
    }
    Device {
        name: name.to_string(),
        attributes: a,
    }
}

/// Two switches of two GPUs below one root complex, and a NIC on the
/// first switch (a layout worked by hand).
fn two_switches() -> Vec<Device> {
    let g = |n: &str, sw: &str| {
        dev(
            n,
            "gpu",
            &[
                ("cliquePix", sw),
                ("cliquePxb", "rp0"),
                ("cliquePhb", "pci0000:00"),
                ("cliqueNode", "node0"),
            ],
        )
    };
    vec![
        g("g0", "sw0"),
        g("g1", "sw0"),
        g("g2", "sw1"),
        g("g3", "sw1"),
        dev(
            "n0",
            "nic",
            &[
                ("cliquePix", "sw0"),
                ("cliquePxb", "rp0"),
                ("cliquePhb", "pci0000:00"),
                ("cliqueNode", "node0"),
            ],
        ),
    ]
}

fn with_free<'a>(devs: &'a [Device], taken: &[&str]) -> Vec<Candidate<'a>> {
    devs.iter()
        .map(|device| Candidate {
            device,
            free: !taken.contains(&device.name.as_str()),
        })
        .collect()
}

#[test]
fn a_pair_fits_one_switch_and_scores_highest_where_it_fills_a_switch() {
    let devs = two_switches();
    let ask = Ask {
        gpus: 2,
        nic: false,
    };
    // All free: a switch of two, filled exactly.
    let all = best_fit(D, &with_free(&devs, &[]), ask).unwrap();
    assert_eq!((all.level, all.left_in_group), (Level::Pix, 0));
    assert_eq!(all.score(), 8);
    // g0 taken: sw1 still holds a pair.
    let one = best_fit(D, &with_free(&devs, &["g0"]), ask).unwrap();
    assert_eq!(one.level, Level::Pix);
    // g0 and g2 taken: no switch holds two, the root port does.
    let split = best_fit(D, &with_free(&devs, &["g0", "g2"]), ask).unwrap();
    assert_eq!((split.level, split.left_in_group), (Level::Pxb, 0));
    assert_eq!(split.score(), 6);
}

#[test]
fn a_nic_must_share_the_level_and_be_free() {
    let devs = two_switches();
    let ask = Ask { gpus: 2, nic: true };
    // The NIC sits on sw0: a pair there is PIX with it.
    let fit = best_fit(D, &with_free(&devs, &["g2"]), ask).unwrap();
    assert_eq!(fit.level, Level::Pix);
    // sw0's GPUs taken: sw1's pair reaches the NIC at the root port.
    let fit = best_fit(D, &with_free(&devs, &["g0"]), ask).unwrap();
    assert_eq!(fit.level, Level::Pxb);
    // The NIC taken: no fit at all.
    assert_eq!(best_fit(D, &with_free(&devs, &["n0"]), ask), None);
}

#[test]
fn a_partition_counts_only_whole_and_free_and_nvlink_skips_partitioned_gpus() {
    let g = |n: &str, p2: &str, p4: &str| {
        dev(
            n,
            "gpu",
            &[
                ("fmPartition2", p2),
                ("fmPartition4", p4),
                ("nvlinkDomain", "d0"),
                ("cliqueNode", "node0"),
            ],
        )
    };
    let devs = vec![
        g("g0", "3", "1"),
        g("g1", "3", "1"),
        g("g2", "4", "1"),
        g("g3", "4", "1"),
    ];
    let pair = Ask {
        gpus: 2,
        nic: false,
    };
    let four = Ask {
        gpus: 4,
        nic: false,
    };
    assert_eq!(
        best_fit(D, &with_free(&devs, &[]), four).unwrap().level,
        Level::FmPartition
    );
    // One GPU of the four taken: partition 1 is not whole; NVLink is
    // not offered on partitioned GPUs; NUMA node has three: no fit.
    assert_eq!(best_fit(D, &with_free(&devs, &["g0"]), four), None);
    // A pair: partition 4 (g2, g3) is whole.
    let fit = best_fit(D, &with_free(&devs, &["g0"]), pair).unwrap();
    assert_eq!((fit.level, fit.score()), (Level::FmPartition, 10));
    // g0 and g2 taken: no partition of two is whole; g1 and g3 share
    // only the NUMA node.
    let fit = best_fit(D, &with_free(&devs, &["g0", "g2"]), pair).unwrap();
    assert_eq!(fit.level, Level::Node);
}

#[test]
fn an_ask_reads_as_gpus_and_an_optional_nic() {
    assert_eq!("4+nic".parse(), Ok(Ask { gpus: 4, nic: true }));
    assert_eq!(
        "8".parse(),
        Ok(Ask {
            gpus: 8,
            nic: false
        })
    );
    assert_eq!(Ask { gpus: 4, nic: true }.to_string(), "4+nic");
    for bad in ["0", "nic", "4+gpu", ""] {
        assert!(bad.parse::<Ask>().is_err(), "{bad}");
    }
}

#[test]
fn the_allocator_takes_the_first_group_in_published_order_that_fits() {
    // sw0 (four GPUs, listed first) and sw1 (two): the tightest switch
    // for a pair is sw1, but the allocator walks g0 first.
    let g = |n: &str, sw: &str| dev(n, "gpu", &[("cliquePix", sw), ("cliqueNode", "node0")]);
    let devs = vec![
        g("g0", "sw0"),
        g("g1", "sw0"),
        g("g2", "sw0"),
        g("g3", "sw0"),
        g("g4", "sw1"),
        g("g5", "sw1"),
    ];
    let pair = Ask {
        gpus: 2,
        nic: false,
    };
    let free = with_free(&devs, &[]);
    assert_eq!(best_fit(D, &free, pair).unwrap().left_in_group, 0);
    assert_eq!(taken_by(D, &free, pair, Level::Pix), vec![0, 1]);
    // g0 and g2 taken: sw0 keeps g1 and g3, the first free pair.
    assert_eq!(
        taken_by(D, &with_free(&devs, &["g0", "g2"]), pair, Level::Pix),
        vec![1, 3]
    );
    // With a NIC asked at the switch and the NIC only on sw1, sw0 is
    // passed over.
    let mut with_nic = devs.clone();
    with_nic.push(dev(
        "n0",
        "nic",
        &[("cliquePix", "sw1"), ("cliqueNode", "node0")],
    ));
    let ask = Ask { gpus: 2, nic: true };
    assert_eq!(
        taken_by(D, &with_free(&with_nic, &[]), ask, Level::Pix),
        vec![4, 5, 6]
    );
    // Four at one switch do not fit on sw1 alone: nothing.
    assert!(taken_by(
        D,
        &with_free(&devs, &["g0"]),
        Ask {
            gpus: 4,
            nic: false
        },
        Level::Pix
    )
    .is_empty());
}

#[test]
fn a_placement_that_costs_a_larger_kept_ask_scores_a_point_less() {
    let devs = two_switches();
    let pair = Ask {
        gpus: 2,
        nic: false,
    };
    let four = Ask { gpus: 4, nic: true };
    // All free: the node takes four and the NIC (at the root port); a
    // pair on sw0 leaves two GPUs: the four no longer fit.
    let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[four]).unwrap();
    assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, true, 7));
    // The four did not fit before (g0 taken): nothing is spoiled.
    let fit = fit_keeping(D, &with_free(&devs, &["g0"]), pair, &[four]).unwrap();
    assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, false, 8));
    // Only larger asks are kept: a pair does not guard pairs.
    let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[pair]).unwrap();
    assert!(!fit.spoils);
    // The four itself spoils no larger ask.
    let fit = fit_keeping(D, &with_free(&devs, &[]), four, &[four]).unwrap();
    assert_eq!((fit.level, fit.spoils), (Level::Pxb, false));
}

#[test]
fn room_counts_each_larger_ask_the_node_still_holds() {
    // Two sockets, each two switches of two GPUs with a NIC per switch
    // (an HGX board's PCIe, as the fleet's switch-pairs shape).
    let mut devs = Vec::new();
    for (sock, sws) in [("node0", ["sw0", "sw1"]), ("node1", ["sw2", "sw3"])] {
        for sw in sws {
            let at = [("cliquePix", sw), ("cliqueNode", sock)];
            devs.push(dev(&format!("{sw}g0"), "gpu", &at));
            devs.push(dev(&format!("{sw}g1"), "gpu", &at));
            devs.push(dev(&format!("{sw}n"), "nic", &at));
        }
    }
    let four = Ask { gpus: 4, nic: true };
    let pair = Ask {
        gpus: 2,
        nic: false,
    };
    assert_eq!(room(D, &with_free(&devs, &[]), four), 2);
    // A pair on sw0 leaves one socket whole: room for one four, not two,
    // though a four still fits (the point a fit-only test missed).
    let fit = fit_keeping(D, &with_free(&devs, &[]), pair, &[four]).unwrap();
    assert!(fit.spoils);
    // With sw0 taken, a pair on sw1 costs nothing more: socket 1 stays.
    let fit = fit_keeping(D, &with_free(&devs, &["sw0g0", "sw0g1"]), pair, &[four]).unwrap();
    assert_eq!((fit.level, fit.spoils, fit.score()), (Level::Pix, false, 8));
    assert_eq!(room(D, &with_free(&devs, &["sw0g0", "sw0g1"]), four), 1);
}

#[test]
fn too_few_free_gpus_do_not_fit_and_anywhere_is_the_last_resort() {
    let devs = vec![
        dev("g0", "gpu", &[("cliqueNode", "node0")]),
        dev("g1", "gpu", &[("cliqueNode", "node1")]),
    ];
    let pair = Ask {
        gpus: 2,
        nic: false,
    };
    let fit = best_fit(D, &with_free(&devs, &[]), pair).unwrap();
    assert_eq!((fit.level, fit.score()), (Level::Anywhere, 0));
    assert_eq!(best_fit(D, &with_free(&devs, &["g1"]), pair), None);
}
