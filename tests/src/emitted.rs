//! Reading back what `p2p-host plan --emit` wrote: the (address, clique) of
//! every GPU per VM block, for QEMU arguments, Cloud Hypervisor arguments and
//! libvirt XML, to compare with the JSON plan.

use p2p_report::PlanReport;
use p2p_topology::Bdf;

/// The plan each `--emit` format must carry: per VM, (host address, clique).
pub fn planned(report: &PlanReport) -> Vec<Vec<(Bdf, u8)>> {
    report
        .vms
        .iter()
        .map(|vm| {
            vm.assignments
                .iter()
                .map(|a| (a.bdf, a.clique.id()))
                .collect()
        })
        .collect()
}

/// The emitters' output is one block per VM, separated by a blank line.
pub fn blocks(out: &str) -> Vec<&str> {
    out.trim_end().split("\n\n").collect()
}

/// The value of `key=` in a comma-separated option list.
pub fn opt<'a>(opts: &'a str, key: &str) -> Option<&'a str> {
    opts.split(',')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// `value='...'` of an XML attribute on one line.
pub fn attr<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let rest = &line[line.find(&format!(" {name}='"))? + name.len() + 3..];
    Some(&rest[..rest.find('\'')?])
}

/// (host address, clique) of each `-device vfio-pci,host=...` line in
/// a QEMU block, the clique from `x-nv-gpudirect-clique`.
pub fn parse_qemu(block: &str) -> Vec<(Bdf, u8)> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("-device vfio-pci,"))
        .map(|l| {
            let opts = l.trim_end_matches(" \\");
            let host = opt(opts, "host").expect("host=").parse().unwrap();
            let clique = opt(opts, "x-nv-gpudirect-clique")
                .expect("clique")
                .parse()
                .unwrap();
            (host, clique)
        })
        .collect()
}

/// (host address, clique) of each `--device path=...` line in a
/// Cloud Hypervisor block; asserts one `--platform vfio_p2p_dma=on`.
pub fn parse_cloud_hypervisor(block: &str) -> Vec<(Bdf, u8)> {
    assert_eq!(
        block
            .lines()
            .filter(|l| l.starts_with("--platform vfio_p2p_dma=on"))
            .count(),
        1,
        "one --platform vfio_p2p_dma=on per VM:\n{block}"
    );
    block
        .lines()
        .filter_map(|l| l.strip_prefix("--device "))
        .map(|l| {
            let opts = l.trim_end_matches(" \\");
            let path = opt(opts, "path").expect("path=");
            let host = path
                .strip_prefix("/sys/bus/pci/devices/")
                .and_then(|p| p.strip_suffix('/'))
                .unwrap_or_else(|| panic!("path {path}"))
                .parse()
                .unwrap();
            let clique = opt(opts, "x_nv_gpudirect_clique")
                .expect("clique")
                .parse()
                .unwrap();
            (host, clique)
        })
        .collect()
}

/// `<hostdev>` addresses and aliases, joined to the `<qemu:device>` overrides by alias.
pub fn parse_libvirt(block: &str) -> Vec<(Bdf, u8)> {
    let mut hostdevs: Vec<(Bdf, String)> = Vec::new();
    let mut overrides: Vec<(String, u8)> = Vec::new();
    let mut address: Option<Bdf> = None;
    let mut device: Option<String> = None;
    for l in block.lines().map(str::trim) {
        if l.starts_with("<address ") {
            let n = |k| u8::from_str_radix(&attr(l, k).unwrap()[2..], 16).unwrap();
            let domain = attr(l, "domain").unwrap();
            address = Some(
                format!(
                    "{}:{:02x}:{:02x}.{:x}",
                    &domain[2..],
                    n("bus"),
                    n("slot"),
                    n("function")
                )
                .parse()
                .unwrap(),
            );
        } else if l.starts_with("<alias ") {
            let a = address.take().expect("<address> before <alias>");
            hostdevs.push((a, attr(l, "name").unwrap().to_string()));
        } else if l.starts_with("<qemu:device ") {
            device = Some(attr(l, "alias").unwrap().to_string());
        } else if l.starts_with("<qemu:property ") {
            assert_eq!(attr(l, "name"), Some("x-nv-gpudirect-clique"), "{l}");
            let d = device.take().expect("<qemu:device> before <qemu:property>");
            overrides.push((d, attr(l, "value").unwrap().parse().unwrap()));
        }
    }
    assert_eq!(
        hostdevs.len(),
        overrides.len(),
        "one override per hostdev:\n{block}"
    );
    hostdevs
        .into_iter()
        .map(|(bdf, alias)| {
            let (_, clique) = overrides
                .iter()
                .find(|(a, _)| *a == alias)
                .unwrap_or_else(|| panic!("no override for alias {alias}:\n{block}"));
            (bdf, *clique)
        })
        .collect()
}
