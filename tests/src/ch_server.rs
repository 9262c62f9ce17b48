//! A stand-in for Cloud Hypervisor's API server on a Unix socket: it answers
//! `PUT /api/v1/vm.add-device` and `vm.remove-device` with scripted status
//! codes and bodies (the tests script those that
//! tests/contracts/cloud-hypervisor-requests.json lists, and check that it
//! lists them), and records every request it got.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// HTTP method (`PUT`).
    pub method: String,
    /// Request path (`/api/v1/vm.add-device`).
    pub path: String,
    /// The Content-Type header, when sent.
    pub content_type: Option<String>,
    /// The body, as many bytes as Content-Length said (lossy UTF-8).
    pub body: String,
}

/// The server: answers one scripted response per connection, then stops.
pub struct FakeCloudHypervisor {
    /// The Unix socket it listens on.
    pub socket: PathBuf,
    received: Arc<Mutex<Vec<Received>>>,
    handle: Option<JoinHandle<()>>,
}

impl FakeCloudHypervisor {
    /// Listens on `socket`; the i-th request gets `answers[i]` (status, JSON body).
    pub fn start(socket: &Path, answers: Vec<(u16, Option<String>)>) -> Self {
        let listener = UnixListener::bind(socket).expect("bind the API socket");
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&received);
        let handle = std::thread::spawn(move || {
            for (status, body) in answers {
                let Ok((mut conn, _)) = listener.accept() else {
                    return;
                };
                let Some(req) = read_request(&mut conn) else {
                    return;
                };
                log.lock().unwrap().push(req);
                let reason = match status {
                    200 => "OK",
                    204 => "No Content",
                    400 => "Bad Request",
                    404 => "Not Found",
                    409 => "Conflict",
                    _ => "Error",
                };
                let payload = body.unwrap_or_default();
                let mut head = format!("HTTP/1.1 {status} {reason}\r\nServer: Cloud Hypervisor API\r\nConnection: close\r\n");
                if !payload.is_empty() {
                    head.push_str(&format!(
                        "Content-Type: application/json\r\nContent-Length: {}\r\n",
                        payload.len()
                    ));
                }
                head.push_str("\r\n");
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(payload.as_bytes());
            }
        });
        Self {
            socket: socket.to_path_buf(),
            received,
            handle: Some(handle),
        }
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for FakeCloudHypervisor {
    fn drop(&mut self) {
        // Unblock accept() if the client sent fewer requests than scripted.
        while !self.handle.as_ref().is_some_and(JoinHandle::is_finished) {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn read_request(conn: &mut std::os::unix::net::UnixStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head)) = req.parse(&buf) {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let len: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let (method, path, content_type) = (
                req.method?.to_string(),
                req.path?.to_string(),
                header("content-type"),
            );
            while buf.len() < head + len {
                let n = conn.read(&mut chunk).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Some(Received {
                method,
                path,
                content_type,
                body: String::from_utf8_lossy(&buf[head..head + len]).into_owned(),
            });
        }
    }
}
