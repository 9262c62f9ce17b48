//! `p2p-host device-plugin` under load, against the kubelet stand-in
//! (tests/src/kubelet.rs): a benchmark that prints figures, asserting only
//! that every call is answered and every restart registered again.
//!
//! - 1,000 GetPreferredAllocation and 1,000 Allocate calls, 32 in flight at
//!   once on one connection (as the kubelet multiplexes its calls), each
//!   call's round trip timed: p50, p99, max;
//! - the plugin's resident memory (VmRSS, VmHWM) and open descriptors before
//!   and after each phase;
//! - 20 kubelet restarts in a row (the stand-in stopped, its socket removed,
//!   a new one started): the time until the plugin registered again, and a
//!   ListAndWatch on the new server each time.
//!
//! `cargo bench -p p2p-tests --bench device_plugin_load` runs the release
//! binary (target/release/p2p-host, built first; `VP2P_BENCH_BINARY` names
//! another). The GPUs are the nested-switch tree's five NVMe functions.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2p_host_kube::device_plugin::api::*;
use p2p_tests::kubelet::{start_kubelet, vfio_tree, GPUS, RESOURCE};
use p2p_tests::{repo_root, target_dir};
use tokio::task::JoinSet;

const CALLS: usize = 1000;
const IN_FLIGHT: usize = 32;
const RESTARTS: usize = 20;

fn plugin_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("VP2P_BENCH_BINARY") {
        return p.into();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "build",
            "-q",
            "--release",
            "-p",
            "p2p-host-cli",
            "--bin",
            "p2p-host",
        ])
        .status()
        .expect("cargo runs");
    assert!(ok.success(), "building the release binary failed");
    target_dir().join("release/p2p-host")
}

/// VmRSS and VmHWM of `pid` in KiB, and its open descriptors.
fn footprint(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (kib("VmRSS:"), kib("VmHWM:"), fds)
}

fn print_footprint(when: &str, pid: u32) {
    let (rss, hwm, fds) = footprint(pid);
    println!(
        "  {when:<34} VmRSS {:>6.1} MiB  VmHWM {:>6.1} MiB  fds {fds}",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}

/// p50, p99 and max of `times`, in microseconds.
fn percentiles(times: &mut [Duration]) -> (f64, f64, f64) {
    times.sort();
    let at = |q: f64| {
        let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1;
        times[i].as_secs_f64() * 1e6
    };
    (at(0.50), at(0.99), at(1.0))
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `CALLS` calls made by `make(i)`, `IN_FLIGHT` at once; each one's time.
async fn load<F, Fut>(make: F) -> (Vec<Duration>, Duration)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let mut set = JoinSet::new();
    let mut times = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        if set.len() == IN_FLIGHT {
            times.push(set.join_next().await.unwrap().unwrap());
        }
        let call = make(i);
        set.spawn(async move {
            let t = Instant::now();
            call.await;
            t.elapsed()
        });
    }
    while let Some(t) = set.join_next().await {
        times.push(t.unwrap());
    }
    (times, start.elapsed())
}

fn report(name: &str, mut times: Vec<Duration>, wall: Duration) {
    let n = times.len();
    let (p50, p99, max) = percentiles(&mut times);
    println!(
        "  {name:<24} {n} calls, {IN_FLIGHT} in flight: p50 {p50:>7.0} us  p99 {p99:>7.0} us  \
         max {max:>7.0} us  ({:.0} calls/s)",
        n as f64 / wall.as_secs_f64()
    );
}

async fn run(dir: &Path, binary: &Path) {
    let tree = vfio_tree(dir);
    let mut kubelet = start_kubelet(dir);
    let mut child = Command::new(binary)
        .args([
            "device-plugin",
            "--resource",
            RESOURCE,
            "--selector",
            "1b36:0010",
        ])
        .arg("--kubelet-dir")
        .arg(dir)
        .arg("--sysfs-root")
        .arg(&tree)
        .args(["--poll-ms", "100"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let reg = kubelet.next_registration().await;
    println!(
        "device-plugin {} ({} GPUs), pid {pid}",
        binary.display(),
        GPUS.len()
    );
    print_footprint("registered", pid);

    let channel = connect_unix(&dir.join(&reg.endpoint)).await.unwrap();
    let client = DevicePluginClient::new(channel);
    let sizes = [1, 2, 4];
    let (times, wall) = load(|i| {
        let mut c = client.clone();
        async move {
            let req = PreferredAllocationRequest {
                container_requests: vec![ContainerPreferredAllocationRequest {
                    available_device_i_ds: ids(&GPUS),
                    must_include_device_i_ds: Vec::new(),
                    allocation_size: sizes[i % 3],
                }],
            };
            let r = c.get_preferred_allocation(req).await.unwrap().into_inner();
            assert_eq!(
                r.container_responses[0].device_i_ds.len(),
                sizes[i % 3] as usize
            );
        }
    })
    .await;
    report("GetPreferredAllocation", times, wall);
    print_footprint("after GetPreferredAllocation", pid);
    let (times, wall) = load(|i| {
        let mut c = client.clone();
        async move {
            let req = AllocateRequest {
                container_requests: vec![ContainerAllocateRequest {
                    devices_ids: ids(&GPUS[i % 3..i % 3 + 2]),
                }],
            };
            let r = c.allocate(req).await.unwrap().into_inner();
            assert!(r.container_responses[0].devices.len() >= 2);
        }
    })
    .await;
    report("Allocate", times, wall);
    print_footprint("after Allocate", pid);
    drop(client);

    let mut waits = Vec::with_capacity(RESTARTS);
    for _ in 0..RESTARTS {
        kubelet.stop(dir).await;
        let t = Instant::now();
        kubelet = start_kubelet(dir);
        let again = kubelet.next_registration().await;
        waits.push(t.elapsed());
        assert_eq!(again.raw, reg.raw, "the same registration");
        let mut c =
            DevicePluginClient::new(connect_unix(&dir.join(&again.endpoint)).await.unwrap());
        let mut s = c.list_and_watch(Empty {}).await.unwrap().into_inner();
        let list = s.message().await.unwrap().unwrap();
        assert_eq!(list.devices.len(), GPUS.len());
    }
    let (p50, p99, max) = percentiles(&mut waits);
    println!(
        "  {RESTARTS} kubelet restarts: registered again each time; from the new kubelet.sock \
         to its Register: p50 {:.0} ms  max {:.0} ms (p99 {:.0} ms; --poll-ms 100)",
        p50 / 1e3,
        max / 1e3,
        p99 / 1e3
    );
    print_footprint("after the restarts", pid);
    let _ = child.kill();
    let _ = child.wait();
}

fn main() {
    let binary = plugin_binary();
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(run(dir.path(), &binary));
}
