//! A vfio-user client that proves `p2p-host serve --gpu ...,vfio=BDF` on
//! QEMU's `edu` device (docs/specs/edu.rst in QEMU): run in the guest of
//! `tests/tests/vmm/serve_vfio_edu.rs`, next to the server.
//!
//! `vfio_user_edu SOCKET ROUND`: connects (the rust-vmm `vfio_user` client),
//! then prints one `EDU-OK name: detail` line a check (or `EDU-FAIL`):
//! - config: vendor/device ids 1234:11e8 and the P2P capability with its clique;
//! - bar0: the identification register read through the mmap the server
//!   handed over (the VFIO device fd), and the liveness check (write x, read !x);
//! - dma (rounds 1 and 2): edu's DMA engine copies memory the client mapped with
//!   DMA_MAP into its buffer and back to another place in that memory;
//! - msi (rounds 1 and 2): an interrupt raised through edu's register fires the
//!   eventfd the client wired with SET_IRQS.
//!
//! - bad-input (round 2): requests the server must refuse and survive (its
//!   log says why; see `bad_inputs`);
//! - leave-mid-dma (round 3): maps memory, starts a DMA into it and exits
//!   without unmapping (the server must clean up; the next round proves it
//!   serves on).
//!
//! Exits 0 when every check passed.
//!
//! `vfio_user_edu SOCKET bench N` instead times, for any served device (edu
//! or a captured GPU), N of each: a 4-byte config read over the socket, a
//! 4-byte BAR0 read over the socket (a trapped access) and a 4-byte BAR0 load
//! through the mmap, and prints `BENCH` lines (mean ns per access).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use p2p_topology::capability::P2pCapability;
use vfio_user::Client;

const IOVA: u64 = 0x100_0000; // edu masks DMA addresses to 28 bits
const MEM: u64 = 1 << 20;
const EDU_BUF: u64 = 0x40000;

struct Bar0 {
    ptr: *mut u8,
    len: usize,
}

impl Bar0 {
    fn read(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len);
        // SAFETY: inside the mapping; MMIO wants one aligned 32-bit load.
        unsafe { std::ptr::read_volatile(self.ptr.add(off).cast::<u32>()) }
    }
    fn write(&self, off: usize, v: u32) {
        assert!(off + 4 <= self.len);
        // SAFETY: as above, one aligned 32-bit store.
        unsafe { std::ptr::write_volatile(self.ptr.add(off).cast::<u32>(), v) }
    }
    fn write64(&self, off: usize, v: u64) {
        self.write(off, v as u32);
        self.write(off + 4, (v >> 32) as u32);
    }
}

fn report(ok: bool, name: &str, detail: String) -> bool {
    println!("EDU-{} {name}: {detail}", if ok { "OK" } else { "FAIL" });
    ok
}

fn map_bar0(client: &Client) -> Result<Bar0, String> {
    let r = client.region(0).ok_or("no region 0")?;
    let fo = r
        .file_offset
        .as_ref()
        .ok_or("BAR0 came without a descriptor")?;
    let area = r.sparse_areas.first().ok_or("BAR0 has no mmap area")?;
    let len = area.size as usize;
    // SAFETY: a fresh shared mapping of the descriptor the server sent; the
    // result is checked.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fo.file().as_raw_fd(),
            (fo.start() + area.offset) as libc::off_t,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    Ok(Bar0 {
        ptr: ptr.cast(),
        len,
    })
}

fn check_config(client: &mut Client) -> bool {
    let mut c = [0u8; 256];
    if let Err(e) = client.region_read(7, 0, &mut c) {
        return report(false, "config", format!("{e}"));
    }
    let ids = (
        u16::from_le_bytes([c[0], c[1]]),
        u16::from_le_bytes([c[2], c[3]]),
    );
    let mut at = usize::from(c[0x34] & !3);
    let mut cap = None;
    for _ in 0..48 {
        if at < 0x40 || at + 8 > 256 {
            break;
        }
        if c[at] == 0x09 && P2pCapability::has_signature(&c[at..at + 8]) {
            cap = P2pCapability::decode(&c[at..at + 8]).ok().map(|p| (at, p));
            break;
        }
        at = usize::from(c[at + 1] & !3);
    }
    let ok = ids == (0x1234, 0x11e8) && cap.is_some();
    let cap = cap
        .map(|(at, p)| format!("P2P capability at {at:#04x}, clique {}", p.clique))
        .unwrap_or_else(|| "no P2P capability".into());
    report(ok, "config", format!("{:04x}:{:04x}, {cap}", ids.0, ids.1))
}

fn check_bar0(bar: &Bar0, round: u32) -> bool {
    let id = bar.read(0);
    let x = 0x1234_5678 ^ round;
    bar.write(4, x);
    let back = bar.read(4);
    report(
        id & 0xffff == 0x00ed && back == !x,
        "bar0",
        format!("id {id:#010x}, liveness wrote {x:#010x} read {back:#010x} (through the mmap)"),
    )
}

fn wait_dma(bar: &Bar0) -> bool {
    let t = Instant::now();
    while bar.read(0x98) & 1 != 0 {
        if t.elapsed() > Duration::from_secs(20) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn check_dma(client: &mut Client, bar: &Bar0) -> bool {
    let mut mem = match memfd() {
        Ok(m) => m,
        Err(e) => return report(false, "dma", e),
    };
    let pattern: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    if let Err(e) = std::os::unix::fs::FileExt::write_all_at(&mem, &pattern, 0) {
        return report(false, "dma", format!("{e}"));
    }
    if let Err(e) = client.dma_map(0, IOVA, MEM, mem.as_raw_fd()) {
        return report(false, "dma", format!("DMA_MAP: {e}"));
    }
    // Memory -> edu, then edu -> memory + 0x1000.
    bar.write64(0x80, IOVA);
    bar.write64(0x88, EDU_BUF);
    bar.write64(0x90, pattern.len() as u64);
    bar.write64(0x98, 1);
    let first = wait_dma(bar);
    bar.write64(0x80, EDU_BUF);
    bar.write64(0x88, IOVA + 0x1000);
    bar.write64(0x90, pattern.len() as u64);
    bar.write64(0x98, 3);
    let second = wait_dma(bar);
    let mut got = vec![0u8; pattern.len()];
    let _ = std::os::unix::fs::FileExt::read_exact_at(&mem, &mut got, 0x1000);
    let _ = mem.flush();
    let same = got == pattern;
    let unmapped = client.dma_unmap(IOVA, MEM).is_ok();
    report(
        first && second && same && unmapped,
        "dma",
        format!(
            "edu copied {} bytes IOVA {IOVA:#x} -> edu {EDU_BUF:#x} -> IOVA {:#x}; arrived intact: {same}",
            pattern.len(),
            IOVA + 0x1000
        ),
    )
}

fn memfd() -> Result<File, String> {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"edu-dma".as_ptr(), 0) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(MEM).map_err(|e| e.to_string())?;
    Ok(f)
}

fn check_msi(client: &mut Client, bar: &Bar0) -> bool {
    // SAFETY: eventfd(2); the result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    if efd < 0 {
        return report(false, "msi", "eventfd failed".into());
    }
    // SAFETY: a new descriptor nothing else owns.
    let mut ev = unsafe { File::from_raw_fd(efd) };
    use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD};
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    if let Err(e) = client.set_irqs(1, flags, 0, 1, &[efd]) {
        return report(false, "msi", format!("SET_IRQS: {e}"));
    }
    bar.write(0x60, 0x5a);
    let t = Instant::now();
    let mut buf = [0u8; 8];
    let fired = loop {
        if ev.read(&mut buf).is_ok() {
            break true;
        }
        if t.elapsed() > Duration::from_secs(20) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let status = bar.read(0x24);
    bar.write(0x64, status);
    report(
        fired,
        "msi",
        format!(
            "edu raised {status:#x}; the eventfd wired with SET_IRQS fired: {fired} (count {})",
            u64::from_ne_bytes(buf)
        ),
    )
}

fn bench(client: &mut Client, n: u32) {
    let mean = |t: Instant| t.elapsed().as_nanos() / u128::from(n.max(1));
    let mut b = [0u8; 4];
    let t = Instant::now();
    for _ in 0..n {
        let _ = client.region_read(7, 0, &mut b);
    }
    println!("BENCH config-read-4B-over-socket {} ns", mean(t));
    let t = Instant::now();
    for _ in 0..n {
        let _ = client.region_read(0, 0, &mut b);
    }
    println!("BENCH bar0-read-4B-over-socket {} ns", mean(t));
    match map_bar0(client) {
        Ok(bar) => {
            let t = Instant::now();
            let mut x = 0u32;
            for _ in 0..n {
                x = x.wrapping_add(bar.read(0));
            }
            println!(
                "BENCH bar0-read-4B-through-mmap {} ns (sum {x:#x})",
                mean(t)
            );
        }
        Err(e) => println!("BENCH bar0-mmap unavailable: {e}"),
    }
}

/// Round 2, first: requests the server must refuse (each reported in its
/// log; the crate's client does not read error replies) while it goes on
/// serving: a DMA_MAP with an eventfd for memory, an overlapping one, an
/// unaligned one, one past the end of the address space, one beyond what
/// the IOMMU translates, SET_IRQS with a
/// memfd for an eventfd.
fn bad_inputs(client: &mut Client) -> bool {
    let (Ok(mem), Ok(mem2)) = (memfd(), memfd()) else {
        return report(false, "bad-input", "memfd".into());
    };
    // SAFETY: eventfd(2); the result is checked.
    let efd = unsafe { libc::eventfd(0, 0) };
    if efd < 0 {
        return report(false, "bad-input", "eventfd".into());
    }
    // SAFETY: a new descriptor nothing else owns.
    let ev = unsafe { File::from_raw_fd(efd) };
    let mut sent = 0;
    sent += u32::from(client.dma_map(0, IOVA, MEM, ev.as_raw_fd()).is_ok());
    sent += u32::from(client.dma_map(0, IOVA, MEM, mem.as_raw_fd()).is_ok());
    sent += u32::from(
        client
            .dma_map(0, IOVA + 0x1000, 0x2000, mem2.as_raw_fd())
            .is_ok(),
    );
    sent += u32::from(
        client
            .dma_map(0, 0x200_0001, 0x1000, mem2.as_raw_fd())
            .is_ok(),
    );
    sent += u32::from(
        client
            .dma_map(0, u64::MAX - 0xfff, 0x2000, mem2.as_raw_fd())
            .is_ok(),
    );
    sent += u32::from(
        client
            .dma_map(0, 0xffff_ffff_f000_0000, 0x1000, mem2.as_raw_fd())
            .is_ok(),
    );
    use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD};
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    sent += u32::from(client.set_irqs(1, flags, 0, 1, &[mem2.as_raw_fd()]).is_ok());
    sent += u32::from(client.dma_unmap(IOVA, MEM).is_ok());
    report(
        sent == 8,
        "bad-input",
        format!("{sent} requests answered (bad descriptor, overlap, unaligned, past the end, beyond the IOMMU, SET_IRQS with a memfd; then the good window unmapped)"),
    )
}

/// Round 3: maps memory, starts a DMA into it and exits without unmapping:
/// the server must unmap the window itself (the next client proves it serves on).
fn leave_mid_dma(client: &mut Client, bar: &Bar0) -> ! {
    let mem = match memfd() {
        Ok(m) => m,
        Err(e) => {
            report(false, "leave-mid-dma", e);
            std::process::exit(1);
        }
    };
    if let Err(e) = client.dma_map(0, IOVA, MEM, mem.as_raw_fd()) {
        report(false, "leave-mid-dma", format!("DMA_MAP: {e}"));
        std::process::exit(1);
    }
    bar.write64(0x80, EDU_BUF);
    bar.write64(0x88, IOVA);
    bar.write64(0x90, 4096);
    bar.write64(0x98, 3);
    report(
        true,
        "leave-mid-dma",
        format!("started a 4096-byte DMA to IOVA {IOVA:#x} and left without unmapping"),
    );
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(2).map(String::as_str) == Some("bench") {
        let n = args.get(3).and_then(|n| n.parse().ok()).unwrap_or(1000);
        match Client::new(Path::new(&args[1])) {
            Ok(mut c) => bench(&mut c, n),
            Err(e) => println!("BENCH connect failed: {e}"),
        }
        return;
    }
    let (Some(sock), Some(round)) = (args.get(1), args.get(2).and_then(|r| r.parse().ok())) else {
        eprintln!("usage: vfio_user_edu SOCKET ROUND");
        std::process::exit(2);
    };
    let mut client = match Client::new(Path::new(sock)) {
        Ok(c) => c,
        Err(e) => {
            report(false, "connect", format!("{e}"));
            std::process::exit(1);
        }
    };
    let mut ok = check_config(&mut client);
    // Memory space and bus mastering on: MMIO, DMA and MSI need them.
    let mut cmd = [0u8; 2];
    ok &= client.region_read(7, 4, &mut cmd).is_ok();
    let cmd = u16::from_le_bytes(cmd) | 0x6;
    ok &= client.region_write(7, 4, &cmd.to_le_bytes()).is_ok();
    match map_bar0(&client) {
        Ok(bar) => {
            ok &= check_bar0(&bar, round);
            // Round 2 maps the IOVA round 3 left mapped: it works only if
            // the server unmapped it when round 3 went away.
            if round == 2 {
                ok &= bad_inputs(&mut client);
            }
            if round == 1 || round == 2 {
                ok &= check_dma(&mut client, &bar);
                ok &= check_msi(&mut client, &bar);
            }
            if round == 3 {
                leave_mid_dma(&mut client, &bar);
            }
        }
        Err(e) => ok &= report(false, "bar0", e),
    }
    let _ = std::io::stdout().flush();
    let _ = client.shutdown();
    std::process::exit(if ok { 0 } else { 1 });
}
