//! Clique policy on the hand-built dual-socket server.

use p2p_allocation::clique::{plan_cliques, MaxLevel, PlanError};
use p2p_test_support::topologies::{acs_rr, bdf, by_port, host_bridge, server};
use p2p_topology::topology::NvLink;
use p2p_topology::{Bdf, PathClass};

fn gpus(list: &[&str]) -> Vec<Bdf> {
    list.iter().map(|s| bdf(s)).collect()
}

fn ids(plan: &p2p_allocation::clique::CliquePlan) -> Vec<u8> {
    plan.assignments.iter().map(|a| a.clique.id()).collect()
}

const ALL: [&str; 6] = [
    "0000:03:00.0", // switch A
    "0000:04:00.0", // switch A
    "0000:07:00.0", // nested switch below A
    "0000:08:00.0", // second root port, same host bridge
    "0000:21:00.0", // second host bridge, socket 0
    "0000:81:00.0", // socket 1
];

#[test]
fn levels_merge_cliques_step_by_step() {
    let t = server();
    let g = gpus(&ALL);
    let at = |l| ids(&plan_cliques(&t, "vm", &g, MaxLevel::new(l).unwrap()).unwrap());
    assert_eq!(at(PathClass::Pix), [0, 0, 1, 2, 3, 4]);
    assert_eq!(at(PathClass::Pxb), [0, 0, 0, 1, 2, 3]);
    assert_eq!(
        at(PathClass::Phb),
        [0, 0, 0, 0, 1, 2],
        "default: same root complex"
    );
    assert_eq!(at(PathClass::Node), [0, 0, 0, 0, 0, 1]);
    assert_eq!(at(PathClass::Sys), [0, 0, 0, 0, 0, 0]);
}

#[test]
fn ids_are_dense_per_vm_and_pairs_carry_reasons() {
    let t = server();
    let plan = plan_cliques(
        &t,
        "b",
        &gpus(&["0000:81:00.0", "0000:21:00.0"]),
        MaxLevel::DEFAULT,
    )
    .unwrap();
    assert_eq!(ids(&plan), [0, 1], "ids start at 0 in every VM");
    assert_eq!(plan.cliques.len(), 2);
    let p = &plan.pairs[0];
    assert!(!p.allowed && !p.same_clique);
    assert_eq!(p.pcie_class, PathClass::Sys);
    assert!(p.reason.starts_with("SYS beyond PHB"), "{}", p.reason);
    assert!(
        plan.assignments[0].reasons[0].starts_with("alone"),
        "{:?}",
        plan.assignments[0].reasons
    );
    assert!(plan.assignments[0].reasons[1].contains("apart from 0000:21:00.0 (SYS)"));
}

#[test]
fn nvlink_groups_stay_together_across_sockets() {
    let mut t = server();
    t.nvlinks.push(NvLink {
        a: bdf("0000:03:00.0"),
        b: bdf("0000:81:00.0"),
        count: Some(18),
    });
    let plan = plan_cliques(
        &t,
        "vm",
        &gpus(&["0000:03:00.0", "0000:81:00.0", "0000:21:00.0"]),
        MaxLevel::DEFAULT,
    )
    .unwrap();
    assert_eq!(ids(&plan), [0, 0, 1]);
    assert!(
        plan.pairs[0].reason.starts_with("NV18: NVLink"),
        "{}",
        plan.pairs[0].reason
    );
    assert!(plan.assignments[0].reasons[0].contains("0000:81:00.0 (NV18)"));
}

#[test]
fn an_nvlink_chain_that_cannot_pair_up_is_split_and_explained() {
    // 03 -NV- 81 -NV- 21, but 03 and 21 are NODE apart at level PHB: 03 and 81
    // may pair, 81 and 21 may pair, 03 and 21 may not.
    let mut t = server();
    t.nvlinks.push(NvLink {
        a: bdf("0000:03:00.0"),
        b: bdf("0000:81:00.0"),
        count: Some(4),
    });
    t.nvlinks.push(NvLink {
        a: bdf("0000:81:00.0"),
        b: bdf("0000:21:00.0"),
        count: Some(4),
    });
    let plan = plan_cliques(
        &t,
        "vm",
        &gpus(&["0000:03:00.0", "0000:81:00.0", "0000:21:00.0"]),
        MaxLevel::DEFAULT,
    )
    .unwrap();
    // Every clique is really a clique under the policy.
    for c in &plan.cliques {
        for a in c {
            for b in c {
                let v = plan
                    .pairs
                    .iter()
                    .find(|p| (p.a == *a && p.b == *b) || (p.a == *b && p.b == *a));
                assert!(
                    a == b || v.unwrap().allowed,
                    "{a} and {b} share a clique without P2P"
                );
            }
        }
    }
    assert_eq!(ids(&plan), [0, 0, 1]);
    assert!(plan.assignments[2]
        .reasons
        .iter()
        .any(|r| r.contains("NVLink group could not stay together")));
}

#[test]
fn acs_redirect_is_named_in_the_reason() {
    let mut t = server();
    for f in &mut t.functions {
        if f.pcie_port_type == Some(p2p_topology::pci::PciePortType::SwitchDownstream) {
            f.acs = acs_rr(true);
        }
    }
    let plan = plan_cliques(
        &t,
        "vm",
        &gpus(&["0000:03:00.0", "0000:04:00.0"]),
        MaxLevel::DEFAULT,
    )
    .unwrap();
    assert_eq!(ids(&plan), [0, 0]);
    assert!(
        plan.pairs[0]
            .reason
            .contains("ACS redirects PCIe peer requests at 0000:02:00.0,0000:02:01.0"),
        "{}",
        plan.pairs[0].reason
    );
}

#[test]
fn bad_input_is_refused() {
    let t = server();
    assert_eq!(
        plan_cliques(
            &t,
            "vm",
            &gpus(&["0000:03:00.0", "0000:99:00.0"]),
            MaxLevel::DEFAULT
        ),
        Err(PlanError::UnknownGpu(bdf("0000:99:00.0")))
    );
    assert_eq!(
        plan_cliques(
            &t,
            "vm",
            &gpus(&["0000:03:00.0", "0000:03:00.0"]),
            MaxLevel::DEFAULT
        ),
        Err(PlanError::Duplicate(bdf("0000:03:00.0")))
    );
    assert_eq!(
        MaxLevel::new(PathClass::Nv(Some(2))),
        Err(PlanError::BadLevel(PathClass::Nv(Some(2))))
    );
    assert!(plan_cliques(&t, "vm", &[], MaxLevel::DEFAULT)
        .unwrap()
        .assignments
        .is_empty());
}

#[test]
fn more_than_sixteen_cliques_is_an_error_not_a_wrap() {
    // 17 GPUs each on its own host bridge of its own NUMA node: 17 cliques at PHB.
    let mut t = p2p_topology::Topology::default();
    let mut list = Vec::new();
    for i in 0..17u8 {
        let bus = i * 8;
        let name = format!("pci0000:{bus:02x}");
        t.host_bridges
            .push(host_bridge(&name, bus, Some(u32::from(i))));
        let addr = format!("0000:{:02x}:00.0", bus + 1);
        let rp = format!("0000:{bus:02x}:01.0");
        t.functions.push(by_port(
            &rp,
            &name,
            None,
            p2p_topology::pci::PciePortType::RootPort,
        ));
        t.functions.push(by_port(
            &addr,
            &name,
            Some(&rp),
            p2p_topology::pci::PciePortType::Endpoint,
        ));
        list.push(bdf(&addr));
    }
    t.sort();
    assert_eq!(
        plan_cliques(&t, "vm", &list, MaxLevel::DEFAULT),
        Err(PlanError::TooManyCliques { needed: 17 })
    );
    let ok = plan_cliques(&t, "vm", &list[..16], MaxLevel::DEFAULT).unwrap();
    assert_eq!(ok.assignments.last().unwrap().clique.id(), 15);
    assert_eq!(
        ids(&plan_cliques(&t, "vm", &list, MaxLevel::new(PathClass::Sys).unwrap()).unwrap()),
        vec![0; 17]
    );
}
