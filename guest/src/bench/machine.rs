//! Where a run happened: host, kernel, CPU, driver versions.

use std::fs;

use p2p_report::bench::Machine;

fn first_line(path: &str) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.lines().next().unwrap_or("").trim().to_string())
}

/// Reads /proc for the machine, and takes the driver facts it is given.
pub fn describe(cuda_driver_api: i32, nccl_version: Option<String>) -> Machine {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
    let driver_version = first_line("/proc/driver/nvidia/version")
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| {
                    w.chars().filter(|c| *c == '.').count() >= 1
                        && w.chars().all(|c| c.is_ascii_digit() || c == '.')
                })
                .map(String::from)
        })
        .unwrap_or_default();
    Machine {
        hostname: first_line("/proc/sys/kernel/hostname").unwrap_or_default(),
        kernel: first_line("/proc/sys/kernel/osrelease").unwrap_or_default(),
        cpu,
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        driver_version,
        cuda_driver_api,
        nccl_version,
    }
}
