//! `cargo bench -p p2p-host-cli --bench serve_load`: `p2p-host serve` with the
//! captured backend (the H200 of the 2x H200 passthrough capture, BAR2 served
//! at 256 MiB), natively, under many vfio-user clients. A benchmark that
//! prints figures; it asserts only that every request was answered rightly.
//!
//! One server process serves 64 copies of the GPU (64 sockets). Phases:
//! - warm-up: 100 sessions on gpu0, then 100 on each GPU, 64 at once (the
//!   first sessions of each GPU grow its threads' buffers, thread stacks and
//!   allocator arenas once);
//! - sequential: 10,000 sessions on gpu0, one after another;
//! - concurrent: 64 clients at once, one per socket, 10,000 sessions in all.
//!
//! A session is what a VMM does, made small: connect and VERSION (rust-vmm's
//! `vfio_user::Client`, which also reads every region's and interrupt's info),
//! two config reads (the vendor id and the P2P capability, checked
//! byte-exact), a BAR0 read, a DMA map of a shared memfd and its unmap, then
//! disconnect. Every 10th session instead disconnects in the middle of a
//! request (the raw client of the serve tests): a REGION_READ whose body never
//! comes, or a DMA_MAP with its descriptor and half its body.
//!
//! Figures: round trips p50/p99 per request, and the server's resident memory
//! (VmRSS), open descriptors (/proc/PID/fd) and threads before, during and
//! after each phase. A leak shows as memory or descriptors that do not come
//! back to their level after the warm-up.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use p2p_host::serve::wire::cmd;
use p2p_host::serve::BarMemory;
use p2p_test_support::vfio_user_client::{Raw, H200};

const GPUS: usize = 64;
/// Sessions per phase; `SERVE_LOAD_SESSIONS` sets another number (a quick look).
fn sessions() -> usize {
    std::env::var("SERVE_LOAD_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}
const WARM_UP: usize = 100;
/// Rounds of the concurrent phase (the figures are the first round's).
const CONCURRENT_ROUNDS: usize = 5;
const DMA_IOVA: u64 = 0x1_0000_0000;
const DMA_SIZE: u64 = 2 << 20;
/// The P2P capability the server must show at 0xC8 for clique 1: id 0x09,
/// next 0, length 8, "P2P", then version 0 and the clique in bits 19..23
/// of the second dword (as host/tests/library/serve_protocol.rs reads it).
const CAPABILITY: [u8; 8] = [0x09, 0x00, 0x08, 0x50, 0x32, 0x50, 0x08, 0x00];

/// The requests timed, in the order a session makes them.
const OPS: [&str; 6] = [
    "connect+VERSION+infos",
    "config read 4 B",
    "config read 8 B (cap)",
    "BAR0 read 8 B",
    "DMA map 2 MiB",
    "DMA unmap",
];

#[derive(Default)]
struct Timings {
    ops: [Vec<Duration>; 6],
    sessions: usize,
    cut: usize,
}

impl Timings {
    fn merge(&mut self, other: Timings) {
        for (a, b) in self.ops.iter_mut().zip(other.ops) {
            a.extend(b);
        }
        self.sessions += other.sessions;
        self.cut += other.cut;
    }
}

/// The server's resident memory, descriptors and threads, from /proc.
#[derive(Debug, Clone, Copy)]
struct Usage {
    rss_kib: u64,
    fds: usize,
    threads: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .expect("a /proc status field")
    };
    Usage {
        rss_kib: field("VmRSS:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("/proc/PID/fd")
            .count(),
        threads: field("Threads:"),
    }
}

/// Connects once the socket's previous client has gone (EBUSY until then).
fn client(sock: &Path, busy: &AtomicU64) -> vfio_user::Client {
    for _ in 0..20_000 {
        match vfio_user::Client::new(sock) {
            Ok(c) => return c,
            Err(_) => {
                busy.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
    panic!("{}: refused for 2 s", sock.display());
}

fn timed<T>(t: &mut Vec<Duration>, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    t.push(t0.elapsed());
    r
}

/// One whole session; see the module docs.
fn session(sock: &Path, ram: &BarMemory, busy: &AtomicU64, t: &mut Timings) {
    let [setup, cfg4, cfg8, bar, map, unmap] = &mut t.ops;
    let mut c = timed(setup, || client(sock, busy));
    let mut id = [0u8; 4];
    timed(cfg4, || c.region_read(7, 0, &mut id)).expect("config read");
    assert_eq!(id, [0xde, 0x10, 0x35, 0x23], "10de:2335");
    let mut cap = [0u8; 8];
    timed(cfg8, || c.region_read(7, 0xc8, &mut cap)).expect("capability read");
    assert_eq!(cap, CAPABILITY);
    let mut b = [0u8; 8];
    timed(bar, || c.region_read(0, 0x1000, &mut b)).expect("BAR0 read");
    let fd = std::os::fd::AsFd::as_fd(ram).as_raw_fd();
    timed(map, || c.dma_map(0, DMA_IOVA, DMA_SIZE, fd)).expect("DMA map");
    timed(unmap, || c.dma_unmap(DMA_IOVA, DMA_SIZE)).expect("DMA unmap");
    t.sessions += 1;
}

/// A session that leaves in the middle of a request: after VERSION, a
/// REGION_READ header announcing 16 body bytes with 8 sent (`n` even), or a
/// DMA_MAP with the memory's descriptor and half of its 32-byte body.
fn cut_session(sock: &Path, ram: &BarMemory, n: usize, busy: &AtomicU64) {
    let mut c = loop {
        let mut c = Raw::connect(sock);
        if c.version().errno() == Some(libc::EBUSY) {
            busy.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(100));
            continue;
        }
        break c;
    };
    let fd = std::os::fd::AsFd::as_fd(ram).as_raw_fd();
    if n % 2 == 0 {
        c.send(cmd::REGION_READ, 0, &[0u8; 8], Some(16 + 16), &[]);
    } else {
        c.send(cmd::DMA_MAP, 0, &[0u8; 16], Some(16 + 32), &[fd]);
    }
    drop(c);
}

fn run_sessions(sock: &Path, ram: &BarMemory, count: usize, busy: &AtomicU64) -> Timings {
    let mut t = Timings::default();
    for n in 0..count {
        if n % 10 == 9 {
            cut_session(sock, ram, n / 10, busy);
            t.cut += 1;
        } else {
            session(sock, ram, busy, &mut t);
        }
    }
    t
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn print_timings(name: &str, t: &mut Timings, wall: Duration) {
    println!(
        "{name}: {} sessions ({} whole, {} cut mid-request) in {:.2} s: {:.0} sessions/s",
        t.sessions + t.cut,
        t.sessions,
        t.cut,
        wall.as_secs_f64(),
        (t.sessions + t.cut) as f64 / wall.as_secs_f64()
    );
    println!(
        "  {:<24} {:>8} {:>10} {:>10} {:>10}",
        "request", "count", "p50 µs", "p99 µs", "max µs"
    );
    for (op, d) in OPS.iter().zip(t.ops.iter_mut()) {
        d.sort();
        println!(
            "  {:<24} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            op,
            d.len(),
            percentile(d, 0.5).as_secs_f64() * 1e6,
            percentile(d, 0.99).as_secs_f64() * 1e6,
            d.last().unwrap().as_secs_f64() * 1e6
        );
    }
}

fn print_usage(label: &str, u: Usage) {
    println!(
        "  {:<66} VmRSS {:>7} KiB   fds {:>5}   threads {:>4}",
        label, u.rss_kib, u.fds, u.threads
    );
}

/// `total` sessions by one client per socket, all at once; the server's
/// usage sampled every 20 ms, the highest kept.
fn concurrent(
    sockets: &[PathBuf],
    ram: &Arc<BarMemory>,
    total: usize,
    busy: &Arc<AtomicU64>,
    pid: u32,
) -> (Timings, Duration, Usage) {
    let peak = Arc::new(std::sync::Mutex::new(usage(pid)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let u = usage(pid);
                let mut p = peak.lock().unwrap();
                if u.rss_kib > p.rss_kib || u.fds > p.fds {
                    *p = u;
                }
                drop(p);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let t0 = Instant::now();
    let workers: Vec<_> = sockets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let (s, ram, busy) = (s.clone(), ram.clone(), busy.clone());
            let n = total / sockets.len() + usize::from(i < total % sockets.len());
            std::thread::spawn(move || run_sessions(&s, &ram, n, &busy))
        })
        .collect();
    let mut t = Timings::default();
    for w in workers {
        t.merge(w.join().expect("a client thread"));
    }
    let wall = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = *peak.lock().unwrap();
    (t, wall, peak)
}

/// Starts `p2p-host serve` with 64 copies of the H200; waits for its ready line.
fn start(h200: &H200, dir: &Path) -> (Child, Vec<PathBuf>) {
    let sockets: Vec<PathBuf> = (0..GPUS).map(|i| dir.join(format!("g{i}.sock"))).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_p2p-host"));
    cmd.arg("serve");
    for s in &sockets {
        cmd.arg("--gpu").arg(format!(
            "socket={},config={},clique=1,max-bar=256M",
            s.display(),
            h200.config().display()
        ));
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("p2p-host serve starts");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "serve ended before it was ready"
        );
        if line.contains("ready:") {
            break;
        }
    }
    // Keep reading, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut err, &mut std::io::sink());
    });
    (child, sockets)
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let h200 = H200::unpack();
    let dir = tempfile::tempdir().expect("temporary directory");
    let ram = BarMemory::new("guest-ram", DMA_SIZE).expect("memfd");
    let (mut child, sockets) = start(&h200, dir.path());
    let pid = child.id();
    let busy = Arc::new(AtomicU64::new(0));
    let ram = Arc::new(ram);
    println!(
        "p2p-host serve (captured H200, BAR2 at 256 MiB), {GPUS} GPUs on {GPUS} sockets, pid {pid}"
    );
    println!("server usage:");
    let cold = usage(pid);
    print_usage("started, no client yet", cold);

    run_sessions(&sockets[0], &ram, WARM_UP, &busy);
    concurrent(&sockets, &ram, GPUS * WARM_UP, &busy, pid);
    std::thread::sleep(Duration::from_millis(200));
    let base = usage(pid);
    print_usage(
        &format!(
            "after warm-up: {WARM_UP} sessions, then {} by {GPUS} at once (the start)",
            GPUS * WARM_UP
        ),
        base,
    );

    // Sequential: one client after another on gpu0; usage sampled half way.
    let total = sessions();
    let t0 = Instant::now();
    let mut seq = run_sessions(&sockets[0], &ram, total / 2, &busy);
    let mid = usage(pid);
    seq.merge(run_sessions(&sockets[0], &ram, total - total / 2, &busy));
    let seq_wall = t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let after_seq = usage(pid);
    print_usage(
        &format!("during the sequential phase (session {})", total / 2),
        mid,
    );
    print_usage(&format!("after {total} sequential sessions"), after_seq);

    // Concurrent: 64 clients at once, one per socket, twice: the second
    // round shows whether anything the first one left keeps growing.
    let (mut conc, conc_wall, peak) = concurrent(&sockets, &ram, total, &busy, pid);
    std::thread::sleep(Duration::from_millis(200));
    let after_conc = usage(pid);
    print_usage("during the concurrent phase (highest seen)", peak);
    print_usage(
        &format!("after {total} sessions by {GPUS} clients at once"),
        after_conc,
    );
    // Further rounds: memory a burst of threads leaves with the allocator
    // stops growing; a leak would not.
    let mut last = after_conc;
    for round in 2..=CONCURRENT_ROUNDS {
        let (_, _, peak) = concurrent(&sockets, &ram, total, &busy, pid);
        std::thread::sleep(Duration::from_millis(200));
        last = usage(pid);
        print_usage(
            &format!("during concurrent round {round} (highest seen)"),
            peak,
        );
        print_usage(&format!("after concurrent round {round}"), last);
    }
    let after_conc2 = last;
    println!(
        "  back to the start: VmRSS {:+} KiB, fds {:+}, threads {:+}",
        after_conc2.rss_kib as i64 - base.rss_kib as i64,
        after_conc2.fds as i64 - base.fds as i64,
        after_conc2.threads as i64 - base.threads as i64
    );
    println!(
        "clients refused with EBUSY and retried (the previous session still ending): {}",
        busy.load(Ordering::Relaxed)
    );
    println!();
    print_timings("sequential", &mut seq, seq_wall);
    println!();
    print_timings("64 at once", &mut conc, conc_wall);

    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let st = child.wait().expect("serve exits");
    println!();
    println!(
        "SIGTERM: exit {:?} after {:.0} ms; sockets left: {}",
        st.code(),
        t0.elapsed().as_secs_f64() * 1e3,
        sockets.iter().filter(|s| s.exists()).count()
    );
}
