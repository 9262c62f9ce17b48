//! For the tests and the load bench of `p2p-host serve`: the captured H200,
//! a server on a temporary socket, and a raw vfio-user client that can send
//! anything.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use p2p_host::overlay::OverlayOptions;
use p2p_host::serve::wire::{cmd, Header, FLAG_ERROR, HEADER_LEN, TYPE_REPLY};
use p2p_host::serve::{self, CaptureFiles, CapturedGpu, ServeEvent, ServeHandle, ServedGpu};
use p2p_topology::Clique;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// The repository's tests/fixtures directory.
pub fn fixtures() -> PathBuf {
    crate::repo_root().join("tests/fixtures")
}

/// The H200 of the 2x H200 passthrough capture (00:06.0), unpacked: its
/// directory holds `config` (4096 bytes) and `resource`.
pub struct H200 {
    /// The temporary directory the capture is unpacked into.
    pub dir: tempfile::TempDir,
}

impl H200 {
    /// Unpacks the GPU's directory of the capture.
    pub fn unpack() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let tgz = fixtures().join("h200x2-passthrough-guest/sysfs.tgz");
        let status = Command::new("tar")
            .arg("xzf")
            .arg(&tgz)
            .arg("-C")
            .arg(dir.path())
            .arg("sysfs/devices/pci0000:00/0000:00:06.0")
            .status()
            .expect("tar runs");
        assert!(status.success(), "tar xzf {} failed", tgz.display());
        H200 { dir }
    }

    /// The GPU's sysfs directory.
    pub fn device_dir(&self) -> PathBuf {
        self.dir
            .path()
            .join("sysfs/devices/pci0000:00/0000:00:06.0")
    }

    /// Its 4096-byte config space.
    pub fn config(&self) -> PathBuf {
        self.device_dir().join("config")
    }

    /// The files `serve` reads a captured GPU from.
    pub fn files(&self) -> CaptureFiles {
        CaptureFiles {
            config: self.config(),
            resource: None,
        }
    }
}

/// A running server and what it reported.
pub struct Running {
    /// The server, until it is shut down.
    pub handle: Option<ServeHandle>,
    /// Every event it reported, in order.
    pub events: Arc<Mutex<Vec<ServeEvent>>>,
    /// Its socket.
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
    _h200: H200,
}

impl Running {
    /// The events so far.
    pub fn events(&self) -> Vec<ServeEvent> {
        self.events.lock().unwrap().clone()
    }

    /// A new client on its socket.
    pub fn connect(&self) -> Raw {
        Raw::connect(&self.socket)
    }

    /// Connects once the previous client's session has ended (one client at a time).
    pub fn connect_free(&self) -> Raw {
        for _ in 0..500 {
            let ev = self.events();
            let on = ev
                .iter()
                .filter(|e| matches!(e, ServeEvent::Connected))
                .count();
            let off = ev
                .iter()
                .filter(|e| matches!(e, ServeEvent::Disconnected { .. }))
                .count();
            if on == off {
                return self.connect();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the previous session did not end");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown();
        }
    }
}

/// Serves the captured H200 with `clique`, BARs above 256 MiB scaled down.
pub fn serve_h200(clique: u8) -> Running {
    let h200 = H200::unpack();
    let (gpu, _) = CapturedGpu::open(&h200.files(), Some(256 << 20)).expect("capture opens");
    let served = ServedGpu::new(gpu, Clique::new(clique).unwrap(), OverlayOptions::default())
        .expect("capability placed");
    let dir = tempfile::tempdir().expect("temporary directory");
    let socket = dir.path().join("gpu.sock");
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let handle = serve::start(
        served,
        &socket,
        Arc::new(move |e| sink.lock().unwrap().push(e)),
    )
    .expect("server starts");
    Running {
        handle: Some(handle),
        events,
        socket,
        _dir: dir,
        _h200: h200,
    }
}

/// A reply: header, body, descriptors.
#[derive(Debug)]
pub struct Reply {
    /// The reply's header.
    pub header: Header,
    /// Its body, after the header.
    pub body: Vec<u8>,
    /// The descriptors that came with it.
    pub fds: Vec<File>,
}

impl Reply {
    /// The errno of an error reply, None for success.
    pub fn errno(&self) -> Option<i32> {
        (self.header.flags & FLAG_ERROR != 0).then_some(self.header.error as i32)
    }
}

/// The capabilities JSON QEMU 11.1 sends with VERSION.
pub const QEMU_CAPS: &str = r#"{"capabilities":{"migration":{"pgsize":4096,"max_bitmap_size":268435456},"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;

/// A client that writes whatever it is told.
pub struct Raw {
    /// The connection.
    pub stream: UnixStream,
    next_id: u16,
}

impl Raw {
    /// Connects to the socket at `path`.
    pub fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Raw { stream, next_id: 1 }
    }

    /// Writes raw bytes.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Sends a command: header (size computed unless `size` is given), body, descriptors.
    pub fn send(
        &mut self,
        command: u16,
        flags: u32,
        body: &[u8],
        size: Option<u32>,
        fds: &[RawFd],
    ) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let h = Header {
            id,
            command,
            size: size.unwrap_or((HEADER_LEN + body.len()) as u32),
            flags,
            error: 0,
        };
        let mut msg = h.encode().to_vec();
        msg.extend_from_slice(body);
        if fds.is_empty() {
            self.write_raw(&msg);
        } else {
            let n = self
                .stream
                .send_with_fds(&[&msg[..]], fds)
                .expect("sendmsg");
            self.write_raw(&msg[n..]);
        }
        id
    }

    /// Reads one reply, or None at end of stream.
    pub fn recv(&mut self) -> Option<Reply> {
        let mut raw = [0u8; HEADER_LEN];
        let mut fds = [0 as RawFd; 4];
        let mut iov = [libc::iovec {
            iov_base: raw.as_mut_ptr().cast(),
            iov_len: HEADER_LEN,
        }];
        // SAFETY: the iovec points at `raw`, live for the call and fine with any bytes.
        let (n, nfds) = unsafe { self.stream.recv_with_fds(&mut iov, &mut fds) }.expect("recvmsg");
        if n == 0 {
            return None;
        }
        if n < HEADER_LEN {
            self.stream
                .read_exact(&mut raw[n..])
                .expect("rest of header");
        }
        let header = Header::parse(&raw);
        assert_eq!(header.flags & 0xf, TYPE_REPLY, "not a reply: {header:?}");
        let mut body = vec![0u8; header.size as usize - HEADER_LEN];
        self.stream.read_exact(&mut body).expect("reply body");
        let fds = fds[..nfds]
            .iter()
            .map(|&fd| {
                // SAFETY: the kernel installed these descriptors for us; each is owned once.
                unsafe { File::from_raw_fd(fd) }
            })
            .collect();
        Some(Reply { header, body, fds })
    }

    /// Sends and reads the reply, checking it answers the command.
    pub fn call(&mut self, command: u16, body: &[u8]) -> Reply {
        let id = self.send(command, 0, body, None, &[]);
        let r = self.recv().expect("a reply");
        assert_eq!(
            (r.header.id, r.header.command),
            (id, command),
            "reply to another message"
        );
        r
    }

    /// VERSION with QEMU 11.1's capabilities.
    pub fn version(&mut self) -> Reply {
        let mut body = vec![0u8, 0, 1, 0];
        body.extend_from_slice(QEMU_CAPS.as_bytes());
        body.push(0);
        self.call(cmd::VERSION, &body)
    }

    /// REGION_READ; the errno of an error reply.
    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Result<Vec<u8>, i32> {
        let mut body = offset.to_ne_bytes().to_vec();
        body.extend_from_slice(&region.to_ne_bytes());
        body.extend_from_slice(&count.to_ne_bytes());
        let r = self.call(cmd::REGION_READ, &body);
        match r.errno() {
            Some(e) => Err(e),
            None => Ok(r.body[16..].to_vec()),
        }
    }

    /// REGION_WRITE; the errno of an error reply.
    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), i32> {
        let mut body = offset.to_ne_bytes().to_vec();
        body.extend_from_slice(&region.to_ne_bytes());
        body.extend_from_slice(&(data.len() as u32).to_ne_bytes());
        body.extend_from_slice(data);
        let r = self.call(cmd::REGION_WRITE, &body);
        r.errno().map_or(Ok(()), Err)
    }

    /// One dword of config space (region 7); panics on an error reply.
    pub fn config_dword(&mut self, offset: u64) -> u32 {
        let b = self.region_read(7, offset, 4).expect("config read");
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The connection's descriptor.
    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

/// A VERSION on a fresh connection succeeds: the server is alive.
pub fn assert_alive(run: &Running) {
    // The previous session may take a moment to end (one client at a time).
    for _ in 0..100 {
        let mut c = run.connect_free();
        let r = c.version();
        if r.errno() != Some(libc::EBUSY) {
            assert_eq!(r.errno(), None, "VERSION on a fresh connection failed");
            assert_eq!(
                c.config_dword(0xc8) & 0xff,
                0x09,
                "the capability is still served"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the server kept answering EBUSY");
}
