//! The conf parser of `p2p-host serve --gpus-from FILE` (what
//! `p2p-host-serve@NAME.service` reads from /etc/vp2p/serve/NAME.conf) on any
//! text. Asserted, from the file format rather than from the parser:
//! - nothing panics;
//! - an error message stays short (at most 600 bytes, whatever the input's
//!   length: texts are quoted by a 64-character prefix) and a line error
//!   names a line that exists and is not blank or a comment;
//! - every spec accepted has a socket path a unix address can hold (at most
//!   107 bytes), exactly one of config= and vfio=, a clique 0..=15, and its
//!   origin is a line of the file holding `socket=` and that path;
//! - a socket given twice is refused exactly when two specs share a path, and
//!   the refusal names both lines.
#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use p2p_host::serve::{check_distinct_sockets, parse_spec_file, SpecFileError, SpecOrigin};

const CONF: &str = "/etc/vp2p/serve/fuzz.conf";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    match parse_spec_file(Path::new(CONF), &text) {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.len() <= 600, "{} bytes: {}", msg.len(), &msg[..600]);
            assert!(msg.starts_with(CONF), "{msg}");
            if let SpecFileError::Line { line, .. } = e {
                let l = lines.get(line - 1).expect("the line exists");
                let content = l.split('#').next().unwrap_or("").trim();
                assert!(!content.is_empty(), "line {line} is blank or a comment: {msg}");
            }
        }
        Ok(specs) => {
            assert!(!specs.is_empty());
            let mut first: HashMap<&Path, usize> = HashMap::new();
            let mut duplicate = None;
            for s in &specs {
                let socket = s.spec.socket.as_os_str().to_str().unwrap();
                assert!(socket.len() <= 107, "{} bytes", socket.len());
                assert!(s.spec.config.is_some() != s.spec.vfio.is_some());
                assert!(s.spec.clique.id() <= 15);
                let SpecOrigin::Line { line, .. } = s.origin else {
                    panic!("a conf spec has a line")
                };
                let l = lines[line - 1];
                assert!(l.contains("socket") && l.contains(socket), "line {line}");
                if let Some(&f) = first.get(s.spec.socket.as_path()) {
                    duplicate.get_or_insert((f, line));
                } else {
                    first.insert(s.spec.socket.as_path(), line);
                }
            }
            match (check_distinct_sockets(&specs), duplicate) {
                (Ok(()), None) => {}
                (Err(e), Some((a, b))) => {
                    let msg = e.to_string();
                    assert!(msg.len() <= 600, "{msg}");
                    assert!(msg.ends_with(&format!("({CONF}:{a} and {CONF}:{b})")), "{msg}");
                }
                (r, d) => panic!("distinct sockets: {r:?}, first duplicate {d:?}"),
            }
        }
    }
});
