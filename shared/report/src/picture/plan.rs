//! `p2p-host plan --svg`: the host tree with each VM's devices framed in the
//! VM's colour and every GPU filled with its clique's colour (devices no VM
//! got greyed), a legend of the cliques, one frame per VM with the reasons
//! under it, and with a mirrored guest layout the tree each VM will see.

use super::boxes::{BoxNode, Flow};
use super::font::wrap;
use super::svg::{Line, Style, INK};
use super::topo::{self, DevicePaint, Paint, NIC_FILL, TEXT, TITLE};
use crate::{PlanReport, TopoReport};
use p2p_topology::guest_layout::{DeviceRole, GuestLayout, GuestTopology, PortKind};
use p2p_topology::topology::Topology;

/// Frame colours of VMs, in VM order (cycled).
const VM_COLOURS: [&str; 6] = [
    "#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f",
];

/// Width at which reasons wrap.
const REASON_WIDTH: f64 = 460.0;

/// The frame colour of the `i`-th VM.
pub fn vm_colour(i: usize) -> &'static str {
    VM_COLOURS[i % VM_COLOURS.len()]
}

/// The fill of the `k`-th clique of the plan (counted over all VMs in
/// order): hues a golden angle apart, light enough for dark text.
pub fn clique_colour(k: usize) -> String {
    let h = (k as f64 * 137.508 + 95.0) % 360.0;
    let (s, l) = (0.62, 0.78);
    let c = (1.0 - (2.0 * l - 1.0f64).abs()) * s;
    let x = c * (1.0 - ((h / 60.0) % 2.0 - 1.0).abs());
    let m = l - c / 2.0;
    let (r, g, b) = match (h / 60.0) as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let v = |f: f64| ((f + m) * 255.0).round() as u8;
    format!("#{:02x}{:02x}{:02x}", v(r), v(g), v(b))
}

/// Every clique of the plan with its colour: (VM index, clique id, fill).
pub fn cliques(plan: &PlanReport) -> Vec<(usize, u8, String)> {
    let mut out = Vec::new();
    for (i, vm) in plan.vms.iter().enumerate() {
        let mut ids: Vec<u8> = vm.assignments.iter().map(|a| a.clique.id()).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let k = out.len();
            out.push((i, id, clique_colour(k)));
        }
    }
    out
}

fn fill_of(all: &[(usize, u8, String)], vm: usize, clique: u8) -> String {
    all.iter()
        .find(|(v, c, _)| *v == vm && *c == clique)
        .map_or_else(|| "#ffffff".into(), |x| x.2.clone())
}

/// The plan's paint over the host tree.
pub fn paint(plan: &PlanReport) -> Paint {
    let all = cliques(plan);
    let mut p = Paint {
        grey_others: true,
        ..Paint::default()
    };
    for (i, vm) in plan.vms.iter().enumerate() {
        for a in &vm.assignments {
            p.devices.insert(
                a.bdf,
                DevicePaint {
                    fill: fill_of(&all, i, a.clique.id()),
                    frame: vm_colour(i).into(),
                    note: format!("{} · clique {}", vm.vm, a.clique.id()),
                },
            );
        }
        for d in plan.guests.get(i).map_or(&[][..], |g| &g.devices) {
            if d.role == DeviceRole::Nic {
                p.devices.insert(
                    d.host,
                    DevicePaint {
                        fill: NIC_FILL.into(),
                        frame: vm_colour(i).into(),
                        note: format!("{} · NIC", vm.vm),
                    },
                );
            }
        }
    }
    p
}

fn chip(fill: &str, stroke: &str, lines: Vec<Line>, data: Vec<(&'static str, String)>) -> BoxNode {
    let mut n = BoxNode::new(Style::boxed(fill, stroke), lines);
    n.data = data;
    n
}

/// One VM's frame (its devices as chips) with the reasons under it.
fn vm_column(plan: &PlanReport, i: usize, all: &[(usize, u8, String)]) -> BoxNode {
    let vm = &plan.vms[i];
    let mut frame_style = Style::boxed("#ffffff", vm_colour(i));
    frame_style.stroke_width = 3.0;
    let mut frame = BoxNode::new(
        frame_style,
        vec![Line::plain(
            format!(
                "VM {}: {} GPU(s) in {} clique(s), max level {}",
                vm.vm,
                vm.assignments.len(),
                vm.cliques.len(),
                vm.max_level
            ),
            TITLE,
        )],
    );
    frame.data = vec![("vm", vm.vm.clone())];
    for a in &vm.assignments {
        frame.children.push(chip(
            &fill_of(all, i, a.clique.id()),
            "#4d4d4d",
            vec![
                Line::plain(format!("GPU {}", a.bdf), TEXT),
                Line::plain(format!("clique {}", a.clique.id()), TEXT),
            ],
            vec![
                ("chip", a.bdf.to_string()),
                ("clique", format!("{}/{}", vm.vm, a.clique.id())),
            ],
        ));
    }
    for d in plan.guests.get(i).map_or(&[][..], |g| &g.devices) {
        if d.role == DeviceRole::Nic {
            frame.children.push(chip(
                NIC_FILL,
                "#4d4d4d",
                vec![Line::plain(format!("NIC {}", d.host), TEXT)],
                vec![("chip", d.host.to_string())],
            ));
        }
    }
    let reasons: Vec<String> = match plan.choices.iter().find(|c| c.vm == vm.vm) {
        Some(c) => c.choice.reasons.clone(),
        None => vm
            .assignments
            .iter()
            .map(|a| format!("{}: {}", a.bdf, a.reasons.join("; ")))
            .collect(),
    };
    let mut lines = vec![Line::plain("why:", TEXT)];
    for r in reasons {
        for l in wrap(&r, TEXT, REASON_WIDTH) {
            lines.push(Line::coloured(l, TEXT, "#333333"));
        }
    }
    let why = BoxNode {
        lines,
        data: vec![("reasons", vm.vm.clone())],
        ..BoxNode::group(Flow::Column, Vec::new())
    };
    BoxNode::group(Flow::Column, vec![frame, why])
}

/// The guest's tree of one VM: pcie.0, its expander host bridges, ports
/// and devices at their guest addresses.
fn guest_box(
    plan: &PlanReport,
    i: usize,
    g: &GuestTopology,
    all: &[(usize, u8, String)],
) -> BoxNode {
    let vm = &plan.vms[i].vm;
    fn below(
        plan_vm: &str,
        i: usize,
        g: &GuestTopology,
        id: &str,
        all: &[(usize, u8, String)],
    ) -> Vec<BoxNode> {
        let (ports, devices) = g.children_of(id);
        let mut out = Vec::new();
        for p in ports {
            let kind = match p.kind {
                PortKind::RootPort => "root port",
                PortKind::SwitchUpstream => "switch upstream",
                PortKind::SwitchDownstream => "switch downstream",
            };
            let mut lines = vec![Line::plain(format!("{kind} {}", p.guest), TEXT)];
            let mut second = match p.host {
                Some(h) => format!("host {h}"),
                None => "no host port".into(),
            };
            if let Some(l) = &p.link {
                second.push_str(&format!(" · x{} {}", l.width, l.speed));
            }
            lines.push(Line::plain(second, TEXT));
            let mut n = chip(
                "#ffffff",
                "#7a7a7a",
                lines,
                vec![("guest-port", p.id.clone())],
            );
            n.children = below(plan_vm, i, g, &p.id, all);
            out.push(n);
        }
        for d in devices {
            let (fill, what, third) = match (d.role, d.clique) {
                (DeviceRole::Gpu, Some(c)) => (fill_of(all, i, c), "GPU", format!("clique {c}")),
                (DeviceRole::Gpu, None) => (topo::GPU_FILL.into(), "GPU", "no clique".into()),
                (DeviceRole::Nic, _) => (NIC_FILL.into(), "NIC", "RDMA NIC".into()),
            };
            let mut data = vec![("guest", d.host.to_string())];
            if let Some(c) = d.clique {
                data.push(("clique", format!("{plan_vm}/{c}")));
            }
            out.push(chip(
                &fill,
                "#4d4d4d",
                vec![
                    Line::plain(format!("{what} {}", d.guest), TEXT),
                    Line::plain(format!("host {}", d.host), TEXT),
                    Line::plain(third, TEXT),
                ],
                data,
            ));
        }
        out
    }
    let mut pcie0 = chip(
        "#fffbea",
        "#b59f3b",
        vec![Line::plain("pcie.0 (guest root bus)", TEXT)],
        vec![("guest-bus", "pcie.0".into())],
    );
    for rc in &g.root_complexes {
        let numa = rc
            .numa_node
            .map_or_else(|| "NUMA unknown".to_string(), |n| format!("guest NUMA {n}"));
        let mut n = chip(
            "#fffbea",
            "#b59f3b",
            vec![
                Line::plain(format!("pxb-pcie {} · bus {:02x}", rc.id, rc.bus_nr), TEXT),
                Line::plain(format!("host {} · {numa}", rc.host), TEXT),
            ],
            vec![("guest-bus", rc.id.clone())],
        );
        n.children = below(vm, i, g, &rc.id, all);
        pcie0.children.push(n);
    }
    pcie0.children.extend(below(vm, i, g, "pcie.0", all));
    let mut frame_style = Style::boxed("#fafafa", vm_colour(i));
    frame_style.stroke_width = 2.0;
    let mut frame = BoxNode::new(
        frame_style,
        vec![Line::plain(
            format!("guest PCIe tree of {vm} (mirror)"),
            TITLE,
        )],
    );
    frame.data = vec![("guest-of", vm.clone())];
    frame.children.push(pcie0);
    for note in &g.notes {
        for l in wrap(note, TEXT, REASON_WIDTH) {
            frame.lines.push(Line::coloured(l, TEXT, "#333333"));
        }
    }
    frame
}

/// `p2p-host plan --svg`: the plan drawn over the host tree `topo` (with
/// `report`, `topo`'s report of the same tree); `source` names the tree in
/// the title (the path as given).
pub fn plan_svg(topo: &Topology, report: &TopoReport, plan: &PlanReport, source: &str) -> String {
    let all = cliques(plan);
    let header = BoxNode {
        lines: vec![
            Line::plain(
                format!(
                    "Plan on {source}: {} VM(s), max level {}, guest topology {}",
                    plan.vms.len(),
                    plan.max_level,
                    match plan.guest_topology {
                        GuestLayout::Flat => "flat",
                        GuestLayout::Mirror => "mirror",
                    }
                ),
                16.0,
            ),
            Line::plain(
                "GPUs filled with their clique's colour, framed in their VM's; devices in no VM grey",
                TEXT,
            ),
        ],
        ..BoxNode::group(Flow::Column, Vec::new())
    };
    let legend = BoxNode::group(
        Flow::Row,
        all.iter()
            .map(|(vm, id, fill)| {
                let mut s = Style::boxed(fill, vm_colour(*vm));
                s.stroke_width = 3.0;
                let name = &plan.vms[*vm].vm;
                let mut n = BoxNode::new(s, vec![Line::plain(format!("{name} clique {id}"), TEXT)]);
                n.data = vec![("legend-clique", format!("{name}/{id}"))];
                n
            })
            .chain(std::iter::once({
                let mut n = BoxNode::new(
                    Style::boxed(topo::GREY_FILL, "#b0b0b0"),
                    vec![Line::coloured("in no VM", TEXT, topo::GREY_TEXT)],
                );
                n.data = vec![("legend", "in no VM".into())];
                n
            }))
            .collect(),
    );
    let tree = topo::tree(topo, report, &paint(plan));
    let vms = BoxNode::group(
        Flow::Row,
        (0..plan.vms.len())
            .map(|i| vm_column(plan, i, &all))
            .collect(),
    );
    let mut parts = vec![header, legend, tree, vms];
    if plan.guest_topology == GuestLayout::Mirror {
        let guests: Vec<BoxNode> = plan
            .guests
            .iter()
            .enumerate()
            .filter(|(i, _)| *i < plan.vms.len())
            .map(|(i, g)| guest_box(plan, i, g, &all))
            .collect();
        parts.push(BoxNode {
            lines: vec![Line::coloured(
                "The guests' trees as the VMs will see them",
                TITLE,
                INK,
            )],
            ..BoxNode::group(Flow::Row, guests)
        });
    }
    super::render(&BoxNode::group(Flow::Column, parts), Some(topo))
}
