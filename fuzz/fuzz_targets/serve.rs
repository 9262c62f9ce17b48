//! `p2p-host serve`'s vfio-user message handling under arbitrary clients: one
//! server (the captured H200 of the passthrough fixture, BAR2 scaled to 256
//! MiB) for the whole run; every input is one client connection that sends an
//! optional VERSION handshake and then messages built from the input (command,
//! flags, body, and sometimes a header size that lies). Asserted: nothing
//! panics (libfuzzer-sys aborts on a panic in any thread), and every
//! well-framed command gets a reply with its id, as a reply, within 5 s.
#![no_main]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use p2p_host::overlay::OverlayOptions;
use p2p_host::serve::wire::{Header, FLAG_NO_REPLY, HEADER_LEN, TYPE_MASK, TYPE_REPLY};
use p2p_host::serve::{self, CaptureFiles, CapturedGpu, ServeEvent, ServedGpu};
use p2p_topology::Clique;

struct Server {
    socket: PathBuf,
    connected: Arc<AtomicUsize>,
    disconnected: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    /// Connections this target made.
    attempts: AtomicUsize,
}

impl Server {
    /// Every connection made so far has been seen and has ended.
    fn idle(&self) -> bool {
        let (c, d, r) = (
            self.connected.load(Ordering::SeqCst),
            self.disconnected.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
        );
        c + r == self.attempts.load(Ordering::SeqCst) && d == c
    }
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("vp2p-fuzz-serve-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tgz = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/h200x2-passthrough-guest/sysfs.tgz");
        let rel = "sysfs/devices/pci0000:00/0000:00:06.0";
        let st = Command::new("tar").arg("xzf").arg(&tgz).arg("-C").arg(&dir).arg(rel).status().unwrap();
        assert!(st.success(), "unpacking {}", tgz.display());
        let files = CaptureFiles { config: dir.join(rel).join("config"), resource: None };
        let (gpu, _) = CapturedGpu::open(&files, Some(256 << 20)).unwrap();
        let served = ServedGpu::new(gpu, Clique::new(3).unwrap(), OverlayOptions::default()).unwrap();
        let connected = Arc::new(AtomicUsize::new(0));
        let disconnected = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (c, d, r) = (connected.clone(), disconnected.clone(), refused.clone());
        let socket = dir.join("gpu.sock");
        let handle = serve::start(
            served,
            &socket,
            Arc::new(move |e| match e {
                ServeEvent::Connected => {
                    c.fetch_add(1, Ordering::SeqCst);
                }
                ServeEvent::Disconnected { .. } => {
                    d.fetch_add(1, Ordering::SeqCst);
                }
                ServeEvent::Refused => {
                    r.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }),
        )
        .unwrap();
        std::mem::forget(handle); // serves until the process ends
        Server {
            socket,
            connected,
            disconnected,
            refused,
            attempts: AtomicUsize::new(0),
        }
    })
}

const CAPS: &str = r#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;

/// Reads one reply header and body; None on timeout or end of stream.
fn reply(s: &mut UnixStream) -> Option<Header> {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).ok()?;
    let h = Header::parse(&h);
    let mut body = vec![0u8; (h.size as usize).saturating_sub(HEADER_LEN).min(2 << 20)];
    s.read_exact(&mut body).ok()?;
    Some(h)
}

fuzz_target!(|data: &[u8]| {
    let srv = server();
    // One client at a time: wait until the previous session has been seen and
    // has ended, so this one is served rather than turned away with EBUSY.
    for _ in 0..5000 {
        if srv.idle() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(srv.idle(), "the previous session did not end within 5 s");
    srv.attempts.fetch_add(1, Ordering::SeqCst);
    let Ok(mut s) = UnixStream::connect(&srv.socket) else {
        panic!("the server stopped accepting");
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut id: u16 = 1;
    let mut input = data;
    let send = |s: &mut UnixStream, h: Header, body: &[u8]| {
        let mut m = h.encode().to_vec();
        m.extend_from_slice(body);
        s.write_all(&m).is_ok()
    };
    if input.first().is_some_and(|b| b & 1 == 1) {
        let mut body = vec![0, 0, 1, 0]; // version 0.1
        body.extend_from_slice(CAPS.as_bytes());
        body.push(0);
        let h = Header { id, command: 1, size: (HEADER_LEN + body.len()) as u32, flags: 0, error: 0 };
        if !send(&mut s, h, &body) {
            return;
        }
        let r = reply(&mut s).expect("VERSION is answered");
        assert_eq!((r.id, r.flags & TYPE_MASK), (id, TYPE_REPLY));
        id += 1;
        input = &input[1..];
    }
    while input.len() >= 4 {
        let (command, flags, len) = (u16::from(input[0] % 17), input[1], usize::from(u16::from_le_bytes([input[2], input[3]])));
        input = &input[4..];
        let body_len = len.min(input.len());
        let (body, rest) = input.split_at(body_len);
        input = rest;
        // Bit 7: the header's size lies (the next byte sets it); bit 6: no-reply.
        let honest = flags & 0x80 == 0;
        let size = if honest {
            (HEADER_LEN + body.len()) as u32
        } else {
            u32::from(body.first().copied().unwrap_or(0)) * 97
        };
        let hflags = if flags & 0x40 != 0 { FLAG_NO_REPLY } else { 0 } | u32::from(flags & 0x2f) & !0x10;
        let h = Header { id, command, size, flags: hflags, error: 0 };
        if !send(&mut s, h, body) {
            return;
        }
        if !honest || hflags & (FLAG_NO_REPLY | TYPE_MASK) != 0 {
            // A lying size or a non-command: the stream may be unframed now.
            return;
        }
        match reply(&mut s) {
            Some(r) => {
                assert_eq!(r.flags & TYPE_MASK, TYPE_REPLY, "command {command}: not a reply");
                if r.id != id {
                    // Replies to earlier no-reply commands that failed may come first.
                    return;
                }
            }
            None => panic!("command {command} ({} byte body) got no reply in 5 s", body.len()),
        }
        id = id.wrapping_add(1);
    }
});
