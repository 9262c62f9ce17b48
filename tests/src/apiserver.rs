//! A stand-in for the Kubernetes API server on loopback, for tests of
//! `p2p-host dra driver`'s API side: plain HTTP/1.1 (parsed with httparse),
//! the `resource.k8s.io/v1` paths a node-local DRA driver uses
//! (ResourceSlices: list with field selectors, get, create, replace, delete;
//! ResourceClaims: get; the node's Node: get, every name a Node with a uid of
//! its own), answering as the API server does (201 on create,
//! 409 AlreadyExists or Conflict, 404 NotFound with a `Status` body), and
//! recording every request. Answers can be made to fail on purpose.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path, query included.
    pub path: String,
    /// The body, as JSON (null when empty).
    pub body: Value,
}

/// What the stand-in holds.
#[derive(Debug, Default)]
pub struct State {
    /// ResourceSlices by name.
    pub slices: BTreeMap<String, Value>,
    /// ResourceClaims by (namespace, name).
    pub claims: BTreeMap<(String, String), Value>,
    /// Every request, in order.
    pub seen: Vec<Seen>,
    /// Answers forced on the next requests of a method: (method, path
    /// prefix, status code).
    pub fail: VecDeque<(String, String, u16)>,
    version: u64,
}

/// The stand-in, serving on 127.0.0.1 until dropped (its thread stays
/// blocked in accept; the test process ends it).
#[derive(Debug, Clone)]
pub struct ApiServer {
    /// Its state.
    pub state: Arc<Mutex<State>>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn field_selector(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|kv| kv.strip_prefix("fieldSelector="))
        .flat_map(|v| {
            let v = v
                .replace("%3D", "=")
                .replace("%2C", ",")
                .replace("%2F", "/");
            v.split(',')
                .filter_map(|p| {
                    p.split_once('=')
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn matches(obj: &Value, selector: &[(String, String)]) -> bool {
    selector.iter().all(|(k, v)| {
        let mut cur = obj;
        for part in k.split('.') {
            cur = &cur[part];
        }
        cur.as_str() == Some(v)
    })
}

impl State {
    fn answer(&mut self, method: &str, path: &str, body: Value) -> (u16, Value) {
        self.seen.push(Seen {
            method: method.to_string(),
            path: path.to_string(),
            body: body.clone(),
        });
        if let Some(i) = self
            .fail
            .iter()
            .position(|(m, p, _)| m == method && path.starts_with(p.as_str()))
        {
            let (_, _, code) = self.fail.remove(i).unwrap();
            return status(code, "InternalError", "failing on purpose");
        }
        let (p, query) = path.split_once('?').unwrap_or((path, ""));
        if let Some(rest) = p.strip_prefix("/apis/resource.k8s.io/v1/namespaces/") {
            let parts: Vec<&str> = rest.split('/').collect();
            if let [ns, "resourceclaims", name] = parts[..] {
                if method == "GET" {
                    return match self.claims.get(&(ns.to_string(), name.to_string())) {
                        Some(c) => (200, c.clone()),
                        None => status(
                            404,
                            "NotFound",
                            &format!("resourceclaims.resource.k8s.io \"{name}\" not found"),
                        ),
                    };
                }
            }
            return status(405, "MethodNotAllowed", path);
        }
        if let (Some(node), "GET") = (p.strip_prefix("/api/v1/nodes/"), method) {
            return (
                200,
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": node, "uid": format!("node-uid-{node}"),
                                    "resourceVersion": "1"}}),
            );
        }
        if p == SLICES {
            match method {
                "GET" => {
                    let sel = field_selector(query);
                    let items: Vec<Value> = self
                        .slices
                        .values()
                        .filter(|s| matches(s, &sel))
                        .cloned()
                        .collect();
                    return (
                        200,
                        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                                        "metadata": {"resourceVersion": self.version.to_string()}, "items": items}),
                    );
                }
                "POST" => {
                    let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
                    if self.slices.contains_key(&name) {
                        return status(
                            409,
                            "AlreadyExists",
                            &format!("resourceslices.resource.k8s.io \"{name}\" already exists"),
                        );
                    }
                    self.version += 1;
                    let mut obj = body;
                    obj["metadata"]["resourceVersion"] = json!(self.version.to_string());
                    obj["metadata"]["uid"] = json!(format!("uid-{}", self.version));
                    self.slices.insert(name, obj.clone());
                    return (201, obj);
                }
                _ => return status(405, "MethodNotAllowed", path),
            }
        }
        if let Some(name) = p.strip_prefix(&format!("{SLICES}/")) {
            let name = name.to_string();
            return match (method, self.slices.get(&name).cloned()) {
                (_, None) => status(
                    404,
                    "NotFound",
                    &format!("resourceslices.resource.k8s.io \"{name}\" not found"),
                ),
                ("GET", Some(s)) => (200, s),
                ("PUT", Some(s)) => {
                    if body["metadata"]["resourceVersion"] != s["metadata"]["resourceVersion"] {
                        return status(409, "Conflict", "the object has been modified");
                    }
                    self.version += 1;
                    let mut obj = body;
                    obj["metadata"]["resourceVersion"] = json!(self.version.to_string());
                    self.slices.insert(name, obj.clone());
                    (200, obj)
                }
                ("DELETE", Some(s)) => {
                    self.slices.remove(&name);
                    (200, s)
                }
                _ => status(405, "MethodNotAllowed", path),
            };
        }
        status(404, "NotFound", path)
    }
}

fn serve_connection(stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        // The head, up to the blank line.
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" || line == b"\n" {
                break;
            }
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if !matches!(req.parse(&head), Ok(httparse::Status::Complete(_))) {
            return;
        }
        let method = req.method.unwrap_or("").to_string();
        let path = req.path.unwrap_or("").to_string();
        let len = req
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| {
                std::str::from_utf8(h.value)
                    .ok()?
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap_or(Value::Null)
        };
        let (code, answer) = state.lock().unwrap().answer(&method, &path, body);
        let text = answer.to_string();
        let head = format!(
            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(text.as_bytes()))
            .is_err()
        {
            return;
        }
    }
}

impl ApiServer {
    /// Starts a stand-in on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let s = s.clone();
                std::thread::spawn(move || serve_connection(stream, s));
            }
        });
        Self { state, url }
    }

    /// Writes a kubeconfig naming the stand-in to `path`.
    pub fn kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\nusers:\n- name: driver\n  user:\n    token: test\ncontexts:\n- name: standin\n  context:\n    cluster: standin\n    user: driver\ncurrent-context: standin\n",
            self.url
        );
        std::fs::write(path, text).unwrap();
    }

    /// Serves `claim` (a ResourceClaim object).
    pub fn add_claim(&self, claim: Value) {
        let ns = claim["metadata"]["namespace"].as_str().unwrap().to_string();
        let name = claim["metadata"]["name"].as_str().unwrap().to_string();
        self.state.lock().unwrap().claims.insert((ns, name), claim);
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The slices held now.
    pub fn slices(&self) -> BTreeMap<String, Value> {
        self.state.lock().unwrap().slices.clone()
    }
}
