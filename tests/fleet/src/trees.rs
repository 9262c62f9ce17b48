//! The fleet's node shapes: each subdirectory of `--trees DIR` that holds a
//! sysfs tree becomes one shape, with the devices `p2p-host dra slices`
//! publishes for it and the class of every pair among them, read from the
//! same tree by the benchmark's own grader (super::grading), not by vp2p's
//! classifier. A directory it cannot use is kept
//! with the reason, so the run can say why it left it out.
//!
//! What a directory may hold, beside its tree (`sysfs/`, `sysfs.tgz`, or
//! `bus/` and `devices/` directly):
//! - `topo.json` (`p2p-host topo --json` of the capture): its `gpus` are the
//!   functions the capture treated as GPUs (`--gpus`); without it, NVIDIA's.
//! - `nvlink.json`: the operator's NVLink map (`--nvlink`).
//! - `fm-partitions.json`: Fabric Manager's partition list (`fmpm -l`,
//!   `--fm-partitions`): the board runs the shared NVSwitch virtualization
//!   model, where GPUs reach each other over NVLink only inside the one
//!   partition activated for their VM.
//! - `rdma-nics.txt`: functions the fleet gives an `infiniband/mlx5_<n>`
//!   entry in its copy of the tree, as a ConnectX shows in sysfs (QEMU has no
//!   RDMA NIC; the captures' e1000e functions stand in).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_topology::bdf::Bdf;
use p2p_topology::classify::PathClass;
use serde_json::Value;

/// A pair's class as the figures count it: `nvidia-smi topo -m`'s, NVLink
/// bonds of any width as one, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// Joined by NVLink.
    Nv,
    /// One PCIe switch.
    Pix,
    /// Several switches, not the host bridge.
    Pxb,
    /// One host bridge (root complex).
    Phb,
    /// Host bridges of one NUMA node.
    Node,
    /// Across NUMA nodes.
    Sys,
}

impl Class {
    /// Every class, nearest first: the order of the figures' columns.
    pub const ALL: [Class; 6] = [
        Class::Nv,
        Class::Pix,
        Class::Pxb,
        Class::Phb,
        Class::Node,
        Class::Sys,
    ];

    /// The class of a classified pair (`X` cannot occur between two devices).
    pub fn of(p: PathClass) -> Class {
        match p {
            PathClass::Nv(_) => Class::Nv,
            PathClass::Pix | PathClass::X => Class::Pix,
            PathClass::Pxb => Class::Pxb,
            PathClass::Phb => Class::Phb,
            PathClass::Node => Class::Node,
            PathClass::Sys => Class::Sys,
        }
    }

    /// The column name: NV, PIX, PXB, PHB, NODE, SYS.
    pub fn name(self) -> &'static str {
        match self {
            Class::Nv => "NV",
            Class::Pix => "PIX",
            Class::Pxb => "PXB",
            Class::Phb => "PHB",
            Class::Node => "NODE",
            Class::Sys => "SYS",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One usable tree: what a node of this shape publishes and how its devices
/// pair.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The directory's name.
    pub name: String,
    /// The tree as `--sysfs-root` takes it (the fleet's copy when NICs were staged).
    pub root: PathBuf,
    /// `p2p-host dra slices` arguments that pick this tree's GPUs and NVLinks.
    pub slice_args: Vec<String>,
    /// Published GPUs: device name -> address.
    pub gpus: BTreeMap<String, Bdf>,
    /// Published RDMA NICs: device name -> address.
    pub nics: BTreeMap<String, Bdf>,
    /// Every published device (GPUs, then NICs) by its index in [`Shape::matrix`].
    pub index: BTreeMap<String, usize>,
    /// The class of every pair of published devices, by index.
    pub matrix: Vec<Vec<Class>>,
    /// The same pairs by PCIe alone (NVLink left out): what a VM's GPUs
    /// get from each other on a partitioned board outside a partition.
    pub pcie: Vec<Vec<Class>>,
    /// Fabric Manager's partitions (empty: NVLink joins GPUs whatever the
    /// set).
    pub partitions: Vec<Partition>,
}

/// One of Fabric Manager's partitions on a node of a shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// Its id (`fmpm -a ID`).
    pub id: u32,
    /// Its GPUs' indices in [`Shape::matrix`], ascending.
    pub gpus: Vec<usize>,
}

impl Shape {
    /// The class between two published devices (SYS for a name it does not publish).
    pub fn class(&self, a: &str, b: &str) -> Class {
        match (self.index.get(a), self.index.get(b)) {
            (Some(&i), Some(&j)) => self.matrix[i][j],
            _ => Class::Sys,
        }
    }

    /// The worst class among every pair of `gpus` (SYS when one is not
    /// published).
    pub fn worst(&self, gpus: &[&str]) -> Class {
        let set: Option<Vec<usize>> = gpus.iter().map(|g| self.index.get(*g).copied()).collect();
        set.map_or(Class::Sys, |set| self.worst_of(&set))
    }

    /// The worst class among every pair of the devices at `set` (indices of
    /// [`Shape::matrix`]). On a partitioned board NVLink counts only when
    /// the set is one partition: Fabric Manager activates whole partitions,
    /// and GPUs outside one reach each other over PCIe.
    pub fn worst_of(&self, set: &[usize]) -> Class {
        let m = if self.partitions.is_empty() || self.is_partition(set) {
            &self.matrix
        } else {
            &self.pcie
        };
        let mut worst = Class::Nv;
        for (i, &a) in set.iter().enumerate() {
            for &b in &set[i + 1..] {
                worst = worst.max(m[a][b]);
            }
        }
        worst
    }

    /// Whether `set` is exactly one of the board's partitions.
    pub fn is_partition(&self, set: &[usize]) -> bool {
        let mut sorted = set.to_vec();
        sorted.sort_unstable();
        self.partitions.iter().any(|p| p.gpus == sorted)
    }

    /// What a VM of `gpus` (and `nic`) got: the worst class among its GPUs,
    /// and between its GPUs and its NIC.
    pub fn vm_classes(&self, gpus: &[String], nic: Option<&str>) -> (Class, Option<Class>) {
        let g: Vec<&str> = gpus.iter().map(String::as_str).collect();
        (self.worst(&g), nic.map(|n| self.nic_class(&g, n)))
    }

    /// Whether `other` is this machine again, as the fleet sees a node: as
    /// many GPUs and NICs, paired alike (device by device, in address order).
    pub fn same_machine(&self, other: &Shape) -> bool {
        self.gpus.len() == other.gpus.len()
            && self.nics.len() == other.nics.len()
            && self.matrix == other.matrix
            && self.partitions == other.partitions
    }

    /// The worst class between `nic` and any of `gpus`.
    pub fn nic_class(&self, gpus: &[&str], nic: &str) -> Class {
        gpus.iter()
            .map(|g| self.class(g, nic))
            .max()
            .unwrap_or(Class::Sys)
    }
}

/// What became of one directory of `--trees`.
#[derive(Debug)]
pub enum Tree {
    /// A shape nodes can be drawn from.
    Usable(Shape),
    /// Left out, and why.
    Skipped {
        /// The directory's name.
        name: String,
        /// Why the fleet cannot use it.
        reason: String,
    },
}

/// Reads every subdirectory of `dir` (sorted by name), staging copies under
/// `work`; `p2p_host` is the binary whose `dra slices` decides the devices.
pub fn discover(dir: &Path, work: &Path, p2p_host: &Path) -> Result<Vec<Tree>, String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    names.sort();
    let mut out: Vec<Tree> = Vec::new();
    for d in &names {
        let name = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tree = match shape(d, &name, &work.join(&name), p2p_host) {
            Ok(s) => match out.iter().find_map(|t| match t {
                Tree::Usable(u) if u.same_machine(&s) => Some(u.name.clone()),
                _ => None,
            }) {
                // A machine captured twice (another QEMU, the same layout)
                // would count twice in the draw.
                Some(first) => Tree::Skipped {
                    name,
                    reason: format!(
                        "the same machine as {first} (the same GPUs, NICs and pair classes)"
                    ),
                },
                None => Tree::Usable(s),
            },
            Err(reason) => Tree::Skipped { name, reason },
        };
        out.push(tree);
    }
    Ok(out)
}

/// The shape of directory `d`, or why there is none.
fn shape(d: &Path, name: &str, work: &Path, p2p_host: &Path) -> Result<Shape, String> {
    let nics_file = d.join("rdma-nics.txt");
    let rdma: Vec<String> = match std::fs::read_to_string(&nics_file) {
        Ok(t) => t
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
            .filter(|l| !l.is_empty())
            .collect(),
        Err(_) => Vec::new(),
    };
    let root = tree_root(d, work, !rdma.is_empty())?;
    for (n, bdf) in rdma.iter().enumerate() {
        let dev = root.join("bus/pci/devices").join(bdf);
        let dev = std::fs::canonicalize(&dev).map_err(|e| {
            format!(
                "{}: {bdf} is not a function of the tree: {e}",
                nics_file.display()
            )
        })?;
        std::fs::create_dir_all(dev.join(format!("infiniband/mlx5_{n}")))
            .map_err(|e| format!("staging {bdf} as an RDMA NIC: {e}"))?;
    }
    let mut slice_args = vec!["--sysfs-root".to_string(), root.display().to_string()];
    let listed = listed_gpus(d)?;
    if let Some(list) = &listed {
        slice_args.push("--gpus".into());
        slice_args.push(
            list.iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    let nvlink = d.join("nvlink.json");
    if nvlink.is_file() {
        slice_args.push("--nvlink".into());
        slice_args.push(nvlink.display().to_string());
    }
    let fm = d.join("fm-partitions.json");
    let fm_list = if fm.is_file() {
        slice_args.push("--fm-partitions".into());
        slice_args.push(fm.display().to_string());
        // The DRA driver's own reader: bounded, the file named in errors.
        p2p_host_kube::dra_driver::fm_partitions::read(&fm)?
    } else {
        Vec::new()
    };
    let (gpus, nics, left_out) = published(p2p_host, &slice_args)?;
    if gpus.len() < 2 {
        let why = if left_out.is_empty() {
            "no GPU found".to_string()
        } else {
            left_out.join("; ")
        };
        return Err(format!(
            "{} GPU(s) that VFIO can assign alone, fewer than the smallest VM's 2 ({why})",
            gpus.len()
        ));
    }
    // Graded by the benchmark's own reader of the tree (super::grading),
    // not by vp2p's classifier.
    let grader = super::grading::Grader::new(&root, nvlink.is_file().then_some(nvlink.as_path()))?;
    let by_pcie = super::grading::Grader::new(&root, None)?;
    let all: Vec<(&String, &Bdf)> = gpus.iter().chain(nics.iter()).collect();
    let mut matrix = vec![vec![Class::Pix; all.len()]; all.len()];
    let mut pcie = matrix.clone();
    for (i, (_, ba)) in all.iter().enumerate() {
        for (j, (_, bb)) in all.iter().enumerate() {
            if i != j {
                matrix[i][j] = grader.class(&ba.to_string(), &bb.to_string())?;
                pcie[i][j] = by_pcie.class(&ba.to_string(), &bb.to_string())?;
            }
        }
    }
    let index: BTreeMap<String, usize> = all
        .iter()
        .enumerate()
        .map(|(i, (n, _))| ((*n).clone(), i))
        .collect();
    let at: BTreeMap<Bdf, usize> = all.iter().enumerate().map(|(i, (_, b))| (**b, i)).collect();
    let mut partitions = Vec::new();
    for p in &fm_list {
        let set: Option<Vec<usize>> = p.gpus.iter().map(|b| at.get(b).copied()).collect();
        let mut set = set.ok_or_else(|| {
            format!(
                "{}: partition {} names a GPU the node does not publish",
                fm.display(),
                p.id
            )
        })?;
        set.sort_unstable();
        partitions.push(Partition {
            id: p.id,
            gpus: set,
        });
    }
    Ok(Shape {
        name: name.to_string(),
        root,
        slice_args,
        gpus,
        nics,
        index,
        matrix,
        pcie,
        partitions,
    })
}

/// Where `d`'s tree is; a copy under `work` when it is packed or must be edited.
fn tree_root(d: &Path, work: &Path, edit: bool) -> Result<PathBuf, String> {
    let tgz = d.join("sysfs.tgz");
    let direct = [d.join("sysfs"), d.to_path_buf()]
        .into_iter()
        .find(|c| c.join("bus/pci/devices").is_dir());
    let _ = std::fs::remove_dir_all(work);
    match direct {
        Some(src) if !edit => Ok(src),
        Some(src) => {
            // A linked tree (fleet-nvswitch's sysfs) is copied, not its link.
            let src = std::fs::canonicalize(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
            let dst = work.join("sysfs");
            let ok = Command::new("cp")
                .arg("-a")
                .arg(&src)
                .arg(&dst)
                .status()
                .map_err(|e| format!("cp: {e}"))?;
            ok.success()
                .then_some(dst)
                .ok_or_else(|| format!("copying {}", src.display()))
        }
        None if tgz.is_file() => {
            std::fs::create_dir_all(work).map_err(|e| format!("{}: {e}", work.display()))?;
            let ok = Command::new("tar")
                .arg("-xzf")
                .arg(&tgz)
                .arg("-C")
                .arg(work)
                .status()
                .map_err(|e| format!("tar: {e}"))?;
            let dst = work.join("sysfs");
            if ok.success() && dst.join("bus/pci/devices").is_dir() {
                Ok(dst)
            } else {
                Err(format!(
                    "{} does not unpack to sysfs/bus/pci/devices",
                    tgz.display()
                ))
            }
        }
        None => Err("no sysfs tree (no sysfs/, sysfs.tgz, or bus/pci/devices)".into()),
    }
}

/// The GPUs `topo.json` lists, when the directory has one.
fn listed_gpus(d: &Path) -> Result<Option<Vec<Bdf>>, String> {
    let f = d.join("topo.json");
    let Ok(text) = std::fs::read_to_string(&f) else {
        return Ok(None);
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", f.display()))?;
    let gpus = v["gpus"]
        .as_array()
        .ok_or_else(|| format!("{}: no `gpus` array", f.display()))?;
    gpus.iter()
        .map(|g| {
            g["bdf"]
                .as_str()
                .and_then(|s| s.parse::<Bdf>().ok())
                .ok_or_else(|| format!("{}: a GPU without a valid `bdf`", f.display()))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// The ResourceSlices `p2p-host dra slices --json --bind` prints for the
/// tree `args` name, as node `node`, and its stderr (the left-out lines).
pub fn slices(
    p2p_host: &Path,
    args: &[String],
    node: &str,
) -> Result<(Vec<Value>, String), String> {
    let out = Command::new(p2p_host)
        .args([
            "dra",
            "slices",
            "--json",
            "--bind",
            "--no-nvml",
            "--node-name",
            node,
        ])
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", p2p_host.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("p2p-host dra slices failed: {}", stderr.trim()));
    }
    let list: Value = serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
    Ok((
        list["items"].as_array().cloned().unwrap_or_default(),
        stderr,
    ))
}

/// Published GPUs and NICs (name -> address) and the left-out lines of
/// [`slices`] for a placeholder node.
#[allow(clippy::type_complexity)]
fn published(
    p2p_host: &Path,
    args: &[String],
) -> Result<(BTreeMap<String, Bdf>, BTreeMap<String, Bdf>, Vec<String>), String> {
    let (items, stderr) = slices(p2p_host, args, "shape")?;
    let (mut gpus, mut nics) = (BTreeMap::new(), BTreeMap::new());
    for slice in &items {
        for d in slice["spec"]["devices"].as_array().into_iter().flatten() {
            let name = d["name"].as_str().unwrap_or_default().to_string();
            let attrs = &d["attributes"];
            let bdf = attrs["resource.kubernetes.io/pciBusID"]["string"]
                .as_str()
                .and_then(|s| s.parse::<Bdf>().ok())
                .ok_or_else(|| format!("device {name} has no pciBusID"))?;
            match attrs["gpu.vp2p.io/kind"]["string"].as_str() {
                Some("gpu") => gpus.insert(name, bdf),
                Some("nic") => nics.insert(name, bdf),
                _ => None,
            };
        }
    }
    let left_out = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("p2p-host: left out "))
        .map(str::to_string)
        .collect();
    Ok((gpus, nics, left_out))
}
