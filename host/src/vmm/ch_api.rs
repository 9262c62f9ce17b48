//! A minimal client for Cloud Hypervisor's REST API on its Unix socket: one
//! HTTP/1.1 request per connection, the response parsed with `httparse`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cloud_hypervisor::DeviceConfig;

/// How long to wait for an answer: hot-adding a GPU maps its BARs, which can
/// take a while for large ones.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Why a request got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The API socket cannot be connected to (no VMM listening there, or no permission).
    #[error("{path}: cannot connect to the API socket: {why}")]
    Connect {
        /// The API socket.
        path: PathBuf,
        /// The connect error.
        why: String,
    },
    /// Sending the request or reading the answer failed, or the body did not serialize.
    #[error("{path}: {why}")]
    Io {
        /// The API socket.
        path: PathBuf,
        /// The I/O or serialization error.
        why: String,
    },
    /// The answer is not a usable HTTP response: unparsable, cut short, or longer than
    /// [`MAX_RESPONSE_PART`].
    #[error("{path}: malformed HTTP response: {why}")]
    Malformed {
        /// The API socket.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// Most bytes of headers, and of body, accepted from the API socket: Cloud
/// Hypervisor's answers are a few hundred bytes; a peer sending more is not
/// one, and is not buffered without bound.
pub const MAX_RESPONSE_PART: usize = 1 << 20;

/// An HTTP answer: status code and body text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiResponse {
    /// HTTP status code: 2xx when Cloud Hypervisor did it, 4xx/5xx with its error in `body`.
    pub status: u16,
    /// Response body, as lossy UTF-8; empty for 204 No Content.
    pub body: String,
}

impl ApiResponse {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A Cloud Hypervisor API endpoint (`--api-socket PATH`).
#[derive(Debug, Clone)]
pub struct ApiClient {
    socket: PathBuf,
}

impl ApiClient {
    /// A client for the API socket at `socket`; each request connects anew.
    pub fn new(socket: impl AsRef<Path>) -> Self {
        Self {
            socket: socket.as_ref().to_path_buf(),
        }
    }

    /// `PUT /api/v1/<endpoint>` with a JSON body.
    pub fn put(&self, endpoint: &str, body: &str) -> Result<ApiResponse, ApiError> {
        let io = |e: std::io::Error| ApiError::Io {
            path: self.socket.clone(),
            why: e.to_string(),
        };
        let mut stream = UnixStream::connect(&self.socket).map_err(|e| ApiError::Connect {
            path: self.socket.clone(),
            why: e.to_string(),
        })?;
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let request = format!(
            "PUT /api/v1/{endpoint} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).map_err(io)?;
        self.read_response(&mut stream)
    }

    fn read_response(&self, stream: &mut UnixStream) -> Result<ApiResponse, ApiError> {
        let malformed = |why: String| ApiError::Malformed {
            path: self.socket.clone(),
            why,
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).map_err(|e| ApiError::Io {
                path: self.socket.clone(),
                why: e.to_string(),
            })?;
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_RESPONSE_PART {
                return Err(malformed(format!(
                    "headers longer than {MAX_RESPONSE_PART} bytes"
                )));
            }
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let status = resp
                        .code
                        .ok_or_else(|| malformed("no status code".into()))?;
                    let length = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .map(|h| {
                            std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .ok_or_else(|| malformed("bad Content-Length".into()))
                        })
                        .transpose()?;
                    let body = self.read_body(stream, buf[head_len..].to_vec(), length, status)?;
                    return Ok(ApiResponse {
                        status,
                        body: String::from_utf8_lossy(&body).into_owned(),
                    });
                }
                Ok(httparse::Status::Partial) if n == 0 => {
                    return Err(malformed(
                        "connection closed before the headers ended".into(),
                    ))
                }
                Ok(httparse::Status::Partial) => continue,
                Err(e) => return Err(malformed(e.to_string())),
            }
        }
    }

    fn read_body(
        &self,
        stream: &mut UnixStream,
        mut body: Vec<u8>,
        length: Option<usize>,
        status: u16,
    ) -> Result<Vec<u8>, ApiError> {
        let io = |e: std::io::Error| ApiError::Io {
            path: self.socket.clone(),
            why: e.to_string(),
        };
        let too_long = |len: usize| ApiError::Malformed {
            path: self.socket.clone(),
            why: format!("a body of {len} bytes or more (at most {MAX_RESPONSE_PART} accepted)"),
        };
        match length {
            Some(len) if len > MAX_RESPONSE_PART => return Err(too_long(len)),
            Some(len) => {
                while body.len() < len {
                    let mut chunk = vec![0u8; len - body.len()];
                    let n = stream.read(&mut chunk).map_err(io)?;
                    if n == 0 {
                        return Err(ApiError::Malformed {
                            path: self.socket.clone(),
                            why: format!("body ended after {} of {len} bytes", body.len()),
                        });
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                body.truncate(len);
            }
            None if status == 204 || status == 304 || (100..200).contains(&status) => body.clear(),
            None => {
                let room = (MAX_RESPONSE_PART + 1).saturating_sub(body.len()) as u64;
                stream.take(room).read_to_end(&mut body).map_err(io)?;
                if body.len() > MAX_RESPONSE_PART {
                    return Err(too_long(body.len()));
                }
            }
        }
        Ok(body)
    }
}

/// The answer to one GPU's hot-add.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct AddOutcome {
    /// The DeviceConfig body sent.
    pub device: DeviceConfig,
    /// HTTP status of the answer.
    pub status: u16,
    /// The answer's body: the PciDeviceInfo (id, bdf) on success, Cloud Hypervisor's
    /// error otherwise.
    pub body: String,
}

/// Sends `vm.add-device` for each device in order and stops at the first
/// error answer; returns the answers received, the failing one last.
pub fn add_devices(
    client: &ApiClient,
    devices: &[DeviceConfig],
    mut progress: impl FnMut(&AddOutcome),
) -> Result<Vec<AddOutcome>, ApiError> {
    let mut out = Vec::new();
    for d in devices {
        let body = serde_json::to_string(d).map_err(|e| ApiError::Io {
            path: client.socket.clone(),
            why: e.to_string(),
        })?;
        let resp = client.put("vm.add-device", &body)?;
        let outcome = AddOutcome {
            device: d.clone(),
            status: resp.status,
            body: resp.body.clone(),
        };
        progress(&outcome);
        out.push(outcome);
        if !resp.is_success() {
            break;
        }
    }
    Ok(out)
}

/// The body of `vm.remove-device` (OpenAPI schema VmRemoveDevice).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct RemoveDevice {
    /// Id of the device to remove, as it was given to `vm.add-device`.
    pub id: String,
}

/// The answer to one GPU's removal.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct RemoveOutcome {
    /// Id of the device whose removal was asked for.
    pub id: String,
    /// HTTP status of the answer (204 when the device was removed).
    pub status: u16,
    /// The answer's body: empty on success, Cloud Hypervisor's error otherwise.
    pub body: String,
}

/// Sends `vm.remove-device` for each id, newest first, whatever the answers:
/// undoing a partial hot-add. Returns every answer.
pub fn remove_devices(client: &ApiClient, ids: &[String]) -> Result<Vec<RemoveOutcome>, ApiError> {
    let mut out = Vec::new();
    for id in ids.iter().rev() {
        let body =
            serde_json::to_string(&RemoveDevice { id: id.clone() }).map_err(|e| ApiError::Io {
                path: client.socket.clone(),
                why: e.to_string(),
            })?;
        let resp = client.put("vm.remove-device", &body)?;
        out.push(RemoveOutcome {
            id: id.clone(),
            status: resp.status,
            body: resp.body,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;

    /// A server on a temporary socket that answers one request with `answer`.
    fn answering(answer: Vec<u8>) -> (tempfile::TempDir, PathBuf, std::thread::JoinHandle<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = s.write_all(&answer);
        });
        (dir, path, t)
    }

    #[test]
    fn a_peer_announcing_a_huge_body_is_refused_before_reading_it() {
        let (_d, path, t) =
            answering(b"HTTP/1.1 200 OK\r\nContent-Length: 4000000000\r\n\r\n{}".to_vec());
        let err = ApiClient::new(&path)
            .put("vm.add-device", "{}")
            .unwrap_err();
        assert!(
            err.to_string().contains("at most 1048576 accepted"),
            "{err}"
        );
        t.join().unwrap();
    }

    #[test]
    fn a_peer_streaming_without_length_is_cut_at_the_bound() {
        let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        answer.resize(answer.len() + MAX_RESPONSE_PART + 4096, b'x');
        let (_d, path, t) = answering(answer);
        let err = ApiClient::new(&path)
            .put("vm.add-device", "{}")
            .unwrap_err();
        assert!(err.to_string().contains("or more (at most"), "{err}");
        t.join().unwrap();
        // A normal answer still passes.
        let (_d, path, t) =
            answering(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n".to_vec());
        assert_eq!(
            ApiClient::new(&path)
                .put("vm.add-device", "{}")
                .unwrap()
                .status,
            204
        );
        t.join().unwrap();
    }
}
