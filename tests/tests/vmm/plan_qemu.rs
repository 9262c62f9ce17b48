//! `p2p-host plan` on the multi-socket trees a real kernel built under QEMU
//! (`tests/fixtures/qemu-*`), checked against the clique policy applied to the
//! topology of QEMU's command line (`scripts/qemu/boot.sh`, written down in
//! `p2p_tests::qemu_expect`): GPUs under one switch or one host bridge share a
//! clique, GPUs on different host bridges or NUMA nodes do not, and raising
//! `--max-level` merges cliques. The "GPUs" are QEMU NVMe controllers, chosen
//! with `--gpu-class 0108`. Every plan comes from the real binary.

use std::collections::BTreeSet;
use std::path::Path;

use p2p_report::PlanReport;
use p2p_tests::emitted::{blocks, parse_cloud_hypervisor, parse_libvirt, parse_qemu, planned};
use p2p_tests::qemu_expect::{self, expected_cliques, Expect};
use p2p_tests::{fixture_dir, plan_stdout};
use p2p_topology::{Bdf, PathClass};

const TWO_SOCKET: &str = "qemu-11.1-two-socket-iommu-on";
const NESTED: &str = "qemu-11.1-nested-switch-iommu-on";

/// Every committed QEMU tree and its boot.sh topology. The IOMMU and the QEMU
/// version change routing facts, never the classes, so the plans are the same.
const TREES: &[(&str, &str)] = &[
    ("qemu-7.2-two-socket-iommu-on", "two-socket"),
    ("qemu-7.2-two-socket-iommu-off", "two-socket"),
    ("qemu-7.2-nested-switch-iommu-on", "nested-switch"),
    ("qemu-11.1-two-socket-iommu-on", "two-socket"),
    ("qemu-11.1-two-socket-iommu-off", "two-socket"),
    ("qemu-11.1-nested-switch-iommu-on", "nested-switch"),
];

const LEVELS: [(&str, PathClass); 5] = [
    ("pix", PathClass::Pix),
    ("pxb", PathClass::Pxb),
    ("phb", PathClass::Phb),
    ("node", PathClass::Node),
    ("sys", PathClass::Sys),
];

type Partition = BTreeSet<BTreeSet<String>>;

fn partition<'a, I, C>(cliques: I) -> Partition
where
    I: IntoIterator<Item = C>,
    C: IntoIterator<Item = &'a str>,
{
    cliques
        .into_iter()
        .map(|c| c.into_iter().map(str::to_string).collect())
        .collect()
}

/// The partition that follows from the pair classes of the table: within a
/// tree "class within the level" is an equivalence, so its classes are the cliques.
fn derived_partition(expect: &Expect, ids: &[&str], level: PathClass) -> Partition {
    let mut cliques: Vec<BTreeSet<String>> = Vec::new();
    for id in ids {
        let home = cliques
            .iter()
            .position(|c| c.iter().all(|m| class_of(expect, m, id).within(level)));
        match home {
            Some(k) => {
                cliques[k].insert(id.to_string());
            }
            None => cliques.push(BTreeSet::from([id.to_string()])),
        }
    }
    cliques.into_iter().collect()
}

/// The class `nvidia-smi topo -m` would print for two GPUs, from the table.
fn class_of(expect: &Expect, a: &str, b: &str) -> PathClass {
    expect
        .pairs
        .iter()
        .find(|p| (p.a, p.b) == (a, b) || (p.a, p.b) == (b, a))
        .unwrap_or_else(|| panic!("{}: no pair {a} {b} in the table", expect.name))
        .class
}

fn gpu_ids(expect: &Expect) -> Vec<&'static str> {
    expect.gpus.iter().map(|g| g.id).collect()
}

fn id_of(expect: &Expect, bdf: Bdf) -> &'static str {
    expect
        .gpus
        .iter()
        .find(|g| expect.addr(g.id) == bdf)
        .unwrap_or_else(|| panic!("{}: {bdf} is not a GPU of the table", expect.name))
        .id
}

fn root(fixture: &str) -> String {
    let d = fixture_dir(fixture);
    assert!(
        d.join("sysfs/bus/pci/devices").is_dir(),
        "{} is missing",
        d.display()
    );
    d.display().to_string()
}

/// `p2p-host plan --sysfs-root TREE --gpu-class 0108 ARGS...`: stdout, which must succeed.
fn plan_out(fixture: &str, args: &[&str]) -> String {
    let root = root(fixture);
    plan_stdout(
        Path::new(&root),
        &[&["--gpu-class", "0108"][..], args].concat(),
    )
}

/// The same with `--json`, parsed.
fn plan_json(fixture: &str, args: &[&str]) -> PlanReport {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = plan_out(fixture, &all);
    let report: PlanReport =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("plan --json: {e}\n{out}"));
    assert_eq!(report.schema, "vp2p.plan/1");
    report
}

/// `--vm NAME=BDF,...` for GPU ids of the table.
fn vm_arg(expect: &Expect, name: &str, ids: &[&str]) -> String {
    let bdfs: Vec<String> = ids.iter().map(|id| expect.addr(id).to_string()).collect();
    format!("{name}={}", bdfs.join(","))
}

/// Checks one VM's plan against the table: the GPUs in the order given, the
/// partition, dense ids, every pair's class and verdict, and reasons that name
/// each other GPU with its class.
fn check_vm(
    what: &str,
    expect: &Expect,
    vm: &p2p_allocation::clique::CliquePlan,
    ids: &[&str],
    level: PathClass,
) {
    assert_eq!(vm.max_level.class(), level, "{what}: max level");
    let got_ids: Vec<&str> = vm
        .assignments
        .iter()
        .map(|a| id_of(expect, a.bdf))
        .collect();
    assert_eq!(
        got_ids, ids,
        "{what}: one assignment per GPU, in the order given"
    );

    // Cliques: the partition the policy gives, numbered 0..k-1, listed consistently.
    let want = derived_partition(expect, ids, level);
    let got = partition(
        vm.cliques
            .iter()
            .map(|c| c.iter().map(|b| id_of(expect, *b)).collect::<Vec<_>>()),
    );
    assert_eq!(got, want, "{what}: cliques");
    let used: BTreeSet<u8> = vm.assignments.iter().map(|a| a.clique.id()).collect();
    let dense: BTreeSet<u8> = (0..vm.cliques.len() as u8).collect();
    assert_eq!(used, dense, "{what}: clique ids dense from 0");
    for a in &vm.assignments {
        assert!(
            vm.cliques[usize::from(a.clique.id())].contains(&a.bdf),
            "{what}: {} has clique {} but cliques[{}] = {:?}",
            a.bdf,
            a.clique,
            a.clique,
            vm.cliques[usize::from(a.clique.id())]
        );
    }

    // Pairs: the table's class, allowed exactly when within the level (no
    // NVLink here), same clique exactly when allowed, and the class in the reason.
    let n = ids.len();
    assert_eq!(vm.pairs.len(), n * (n - 1) / 2, "{what}: every pair once");
    for p in &vm.pairs {
        let (a, b) = (id_of(expect, p.a), id_of(expect, p.b));
        let class = class_of(expect, a, b);
        let ctx = format!("{what}: pair {a} {b}");
        assert_eq!(p.class, class, "{ctx}: class");
        assert_eq!(p.pcie_class, class, "{ctx}: PCIe class");
        assert_eq!(p.allowed, class.within(level), "{ctx}: allowed");
        assert_eq!(p.same_clique, p.allowed, "{ctx}: same clique");
        let verdict = if p.allowed { "within" } else { "beyond" };
        assert!(
            p.reason.starts_with(&format!("{class} {verdict} {level}")),
            "{ctx}: reason {:?}",
            p.reason
        );
    }

    // Reasons: every other GPU named with its class, under "with" or "apart from".
    for a in &vm.assignments {
        let me = id_of(expect, a.bdf);
        let with = a.reasons.iter().find(|r| r.starts_with("with "));
        let apart = a.reasons.iter().find(|r| r.starts_with("apart from "));
        let alone = vm.cliques[usize::from(a.clique.id())].len() == 1;
        assert_eq!(
            alone,
            a.reasons.iter().any(|r| r.starts_with("alone")),
            "{what}: {me}: 'alone' exactly when its clique has one GPU: {:?}",
            a.reasons
        );
        for other in vm.assignments.iter().filter(|o| o.bdf != a.bdf) {
            let class = class_of(expect, me, id_of(expect, other.bdf));
            let named = format!("{} ({class})", other.bdf);
            let (list, label) = if other.clique == a.clique {
                (with, "with")
            } else {
                (apart, "apart from")
            };
            assert!(
                list.is_some_and(|r| r.contains(&named)),
                "{what}: {me}: '{label}' should name {named}: {:?}",
                a.reasons
            );
        }
        if let Some(r) = apart {
            assert!(
                r.ends_with(&format!("beyond {level} without NVLink")),
                "{what}: {me}: {r:?}"
            );
        }
    }
}

/// The whole host as one VM ("vm0", every GPU in address order), at every level,
/// on every QEMU tree.
#[test]
fn every_tree_at_every_level_follows_the_policy() {
    for &(fixture, topology) in TREES {
        let expect = qemu_expect::by_name(topology);
        let mut by_addr: Vec<&str> = gpu_ids(expect);
        by_addr.sort_by_key(|id| expect.addr(id));
        for (flag, level) in LEVELS {
            let what = format!("{fixture} --max-level {flag}");
            let table = partition(expected_cliques(topology, level));
            assert_eq!(
                derived_partition(expect, &gpu_ids(expect), level),
                table,
                "{what}: the hand-written cliques disagree with qemu_expect's classes"
            );
            let report = plan_json(fixture, &["--max-level", flag]);
            assert_eq!(report.max_level.class(), level, "{what}");
            assert_eq!(report.vms.len(), 1, "{what}: one VM");
            assert_eq!(report.vms[0].vm, "vm0", "{what}");
            check_vm(&what, expect, &report.vms[0], &by_addr, level);
        }
    }
}

/// Spelled out for the two-socket tree at the default level: the switch pair and
/// the other root port of pxb0 together, pxb2 (same node, other host bridge)
/// apart, node 1's switch pair together, pcie.0 (node unknown) alone.
#[test]
fn two_socket_default_plan() {
    let report = plan_json(TWO_SOCKET, &[]);
    assert_eq!(
        report.max_level.class(),
        PathClass::Phb,
        "the default level"
    );
    let vm = &report.vms[0];
    let clique = |bdf: &str| vm.clique_of(bdf.parse().unwrap()).unwrap().id();
    // Address order: 01 (gpu6), 23 (gpu0), 24 (gpu1), 26 (gpu2), 41 (gpu3), 83, 84.
    let got: Vec<u8> = p2p_tests::TWO_SOCKET_GPUS
        .iter()
        .map(|b| clique(b))
        .collect();
    assert_eq!(got, [0, 1, 1, 1, 2, 3, 3]);
    assert_eq!(
        plan_out(TWO_SOCKET, &["--json", "--max-level", "phb"]),
        plan_out(TWO_SOCKET, &["--json"]),
        "no --max-level is --max-level phb"
    );
}

/// Spelled out for the nested switches: PIX splits switch A's GPU from switch
/// B's, PXB joins them, PHB adds the other root port, nothing joins node 1 below SYS.
#[test]
fn nested_switch_levels_spelled_out() {
    let cliques = |level: &str| -> Vec<u8> {
        let r = plan_json(NESTED, &["--max-level", level]);
        // Address order: 25 (gpu0), 26 (gpu1), 27 (gpu2), 28 (gpu3), 81 (gpu4).
        r.vms[0].assignments.iter().map(|a| a.clique.id()).collect()
    };
    assert_eq!(cliques("pix"), [0, 0, 1, 2, 3]);
    assert_eq!(cliques("pxb"), [0, 0, 0, 1, 2]);
    assert_eq!(cliques("phb"), [0, 0, 0, 0, 1]);
    assert_eq!(cliques("node"), [0, 0, 0, 0, 1]);
    assert_eq!(cliques("sys"), [0, 0, 0, 0, 0]);
}

/// Each step up in `--max-level` only merges cliques: every clique at one level
/// lies inside one clique at the next, and on these trees the count drops
/// exactly where the table has pairs of the new class.
#[test]
fn raising_the_level_merges_cliques() {
    for &(fixture, topology) in TREES {
        let expect = qemu_expect::by_name(topology);
        let parts: Vec<Partition> = LEVELS
            .iter()
            .map(|(flag, _)| {
                let r = plan_json(fixture, &["--max-level", flag]);
                partition(
                    r.vms[0]
                        .cliques
                        .iter()
                        .map(|c| c.iter().map(|b| id_of(expect, *b)).collect::<Vec<_>>()),
                )
            })
            .collect();
        for (k, w) in parts.windows(2).enumerate() {
            let (lower, upper) = (LEVELS[k].0, LEVELS[k + 1].0);
            for c in &w[0] {
                assert!(
                    w[1].iter().any(|d| c.is_subset(d)),
                    "{fixture}: clique {c:?} at {lower} is split at {upper}: {:?}",
                    w[1]
                );
            }
            let is_gpu = |id: &str| expect.gpus.iter().any(|g| g.id == id);
            let new_class = expect
                .pairs
                .iter()
                .any(|p| p.class == LEVELS[k + 1].1 && is_gpu(p.a) && is_gpu(p.b));
            assert_eq!(
                w[1].len() < w[0].len(),
                new_class,
                "{fixture}: {lower} -> {upper}: {:?} -> {:?}",
                w[0],
                w[1]
            );
        }
        assert_eq!(
            parts[4].len(),
            1,
            "{fixture}: SYS puts every GPU in one clique"
        );
    }
}

/// Two VMs on the two-socket host: each numbers its own cliques from 0, in the
/// order its GPUs were given, and pairs never cross VMs.
#[test]
fn two_vms_each_number_cliques_from_zero() {
    let expect = &qemu_expect::TWO_SOCKET;
    let a = ["gpu4", "gpu0", "gpu5", "gpu1"];
    let b = ["gpu3", "gpu2", "gpu6"];
    let (va, vb) = (vm_arg(expect, "a", &a), vm_arg(expect, "b", &b));
    for (flag, level) in LEVELS {
        let what = format!("two VMs --max-level {flag}");
        let report = plan_json(TWO_SOCKET, &["--vm", &va, "--vm", &vb, "--max-level", flag]);
        assert_eq!(report.vms.len(), 2, "{what}");
        assert_eq!((&*report.vms[0].vm, &*report.vms[1].vm), ("a", "b"));
        check_vm(&format!("{what}, VM a"), expect, &report.vms[0], &a, level);
        check_vm(&format!("{what}, VM b"), expect, &report.vms[1], &b, level);
    }
    // At the default level, spelled out: a's node-1 switch pair comes first, so it is 0.
    let report = plan_json(TWO_SOCKET, &["--vm", &va, "--vm", &vb]);
    let ids = |k: usize| -> Vec<u8> {
        report.vms[k]
            .assignments
            .iter()
            .map(|x| x.clique.id())
            .collect()
    };
    assert_eq!(ids(0), [0, 1, 0, 1], "a: gpu4 gpu0 gpu5 gpu1");
    assert_eq!(
        ids(1),
        [0, 1, 2],
        "b: gpu3 gpu2 gpu6 (NODE, SYS: all apart)"
    );
}

/// `--emit qemu|libvirt|cloud-hypervisor` on both trees, one VM and two VMs, at
/// two levels: one device per GPU, in the plan's order, with the planned clique.
#[test]
fn emitters_carry_the_planned_cliques() {
    type Parse = fn(&str) -> Vec<(Bdf, u8)>;
    let formats: [(&str, Parse); 3] = [
        ("qemu", parse_qemu),
        ("libvirt", parse_libvirt),
        ("cloud-hypervisor", parse_cloud_hypervisor),
    ];
    let two_vms = |e: &Expect, a: &[&str], b: &[&str]| {
        vec![
            "--vm".to_string(),
            vm_arg(e, "a", a),
            "--vm".to_string(),
            vm_arg(e, "b", b),
        ]
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        (TWO_SOCKET, vec![]),
        (TWO_SOCKET, vec!["--max-level".into(), "pix".into()]),
        (
            TWO_SOCKET,
            two_vms(
                &qemu_expect::TWO_SOCKET,
                &["gpu4", "gpu0", "gpu5", "gpu1"],
                &["gpu3", "gpu2", "gpu6"],
            ),
        ),
        (NESTED, vec![]),
        (NESTED, vec!["--max-level".into(), "pix".into()]),
        (
            NESTED,
            // gpu0 and gpu1 share IOMMU group 9 (no ACS in QEMU's switch
            // ports): they go to one VM, or VFIO cannot start the other.
            two_vms(
                &qemu_expect::NESTED_SWITCH,
                &["gpu4", "gpu2", "gpu0", "gpu1"],
                &["gpu3"],
            ),
        ),
    ];
    for (fixture, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = planned(&plan_json(fixture, &args));
        let names: Vec<String> = plan_json(fixture, &args)
            .vms
            .into_iter()
            .map(|v| v.vm)
            .collect();
        for (format, parse) in formats {
            let mut all = vec!["--emit", format];
            all.extend_from_slice(&args);
            let out = plan_out(fixture, &all);
            let what = format!("{fixture} {}", all.join(" "));
            let blocks = blocks(&out);
            assert_eq!(blocks.len(), want.len(), "{what}: one block per VM:\n{out}");
            for ((block, want), name) in blocks.iter().zip(&want).zip(&names) {
                let head = block.lines().next().unwrap_or("");
                assert!(
                    head.contains(&format!(" {name}: {} GPU(s)", want.len())),
                    "{what}: block header {head:?}"
                );
                assert_eq!(&parse(block), want, "{what}: VM {name}:\n{block}");
            }
        }
    }
}

/// `--first-slot` moves the flat layout's pcie.0 slots. By hand: the seven
/// GPUs of the two-socket tree take one slot each in address order, from the
/// slot given; from 0x18 they fill 0x18..=0x1e exactly (0x1f is q35's ICH9
/// slot), from 0x19 only six slots are left. The default stays 0x10.
#[test]
fn first_slot_moves_the_flat_devices() {
    let addrs = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix("-device vfio-pci,"))
            .map(|l| p2p_tests::emitted::opt(l, "addr").unwrap().to_string())
            .collect()
    };
    let moved = plan_out(TWO_SOCKET, &["--emit", "qemu", "--first-slot", "0x18"]);
    assert_eq!(
        addrs(&moved),
        ["0x18.0", "0x19.0", "0x1a.0", "0x1b.0", "0x1c.0", "0x1d.0", "0x1e.0"]
    );
    // Decimal 24 is 0x18; the JSON plan carries the same guest addresses.
    let report = plan_json(TWO_SOCKET, &["--first-slot", "24"]);
    let guest: Vec<String> = report.guests[0]
        .devices
        .iter()
        .map(|d| d.guest.to_string())
        .collect();
    assert_eq!(guest[0], "0000:00:18.0");
    assert_eq!(guest[6], "0000:00:1e.0");
    let default = plan_out(TWO_SOCKET, &["--emit", "qemu"]);
    assert_eq!(addrs(&default)[0], "0x10.0");
    assert_eq!(
        default,
        plan_out(TWO_SOCKET, &["--emit", "qemu", "--first-slot", "0x10"])
    );

    let refused = |slot: &str| {
        p2p_tests::run(
            "p2p-host",
            &[
                "plan",
                "--sysfs-root",
                &root(TWO_SOCKET),
                "--gpu-class",
                "0108",
                "--first-slot",
                slot,
            ],
        )
    };
    let r = refused("0x19");
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains(
            "VM vm0: guest topology: the flat layout holds at most 6 devices on pcie.0 \
             (slots 0x19..=0x1e), the VM has 7"
        ),
        "{}",
        r.stderr
    );
    for bad in ["0x1f", "0", "32"] {
        let r = refused(bad);
        assert_eq!(r.code, Some(2), "{bad}: {}", r.stderr);
        assert!(
            r.stderr
                .contains(&format!("invalid value '{bad}' for '--first-slot <SLOT>'"))
                && r.stderr
                    .contains("a layout starts at a slot from 0x01 to 0x1e"),
            "{bad}: {}",
            r.stderr
        );
    }
}
