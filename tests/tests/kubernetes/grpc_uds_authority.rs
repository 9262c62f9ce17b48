//! `p2p-host dra driver`'s registration socket answers a client that sends
//! what grpc-go sends when it dials a unix socket by its bare path, as the
//! kubelet's plugin watcher does (k8s.io/kubernetes v1.37.2,
//! pluginmanager/operationexecutor/operation_generator.go `dial`): the
//! percent-encoded socket path as `:authority`. h2, the driver's HTTP/2
//! server, refuses that authority with RST_STREAM(PROTOCOL_ERROR); the
//! driver's shim (host/kube/src/grpc/uds_authority/) replaces it.
//!
//! No HTTP/2 library here builds such a request (h2's client refuses the
//! authority too), so the client is bytes written by hand: the connection
//! preface and frames of RFC 9113, the header block of RFC 7541 (static
//! table indices and plain string literals), the gRPC message framing
//! (a flag byte and a 4-byte length), and PluginInfo decoded from the
//! published table (tests/src/grpc_wire).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use p2p_tests::dra_kubelet::register;
use p2p_tests::dra_node::{plain_tree, rt, start, Dirs, Plugin, DRIVER};
use p2p_tests::grpc_wire::protobuf::Decoded;
use p2p_tests::grpc_wire::table::KUBELET_PLUGINREGISTRATION_V1;

/// RFC 9113 §3.4.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const GOAWAY: u8 = 0x7;
/// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

fn put_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = (payload.len() as u32).to_be_bytes();
    out.extend_from_slice(&len[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// `s` as an HPACK string literal, no Huffman coding (RFC 7541 §5.2; the
/// 7-bit length prefix holds what these tests send).
fn hpack_string(out: &mut Vec<u8>, s: &str) {
    let n = u8::try_from(s.len()).ok().filter(|&n| n < 0x7f).unwrap();
    out.push(n);
    out.extend_from_slice(s.as_bytes());
}

/// GetInfo's request headers with `authority`, none of them indexed, as
/// RFC 7541 Appendix A's static table numbers the names.
fn get_info_headers(authority: &str) -> Vec<u8> {
    let path = KUBELET_PLUGINREGISTRATION_V1
        .method("Registration", "GetInfo")
        .path;
    // :method POST (index 3) and :scheme http (index 6), indexed (§6.1).
    let mut b = vec![0x80 | 3, 0x80 | 6];
    // §6.2.2, literal without indexing: 0000 and the name's index in
    // 4 bits, 15 and the rest after it for larger ones.
    b.push(4); // :path
    hpack_string(&mut b, path);
    b.push(1); // :authority
    hpack_string(&mut b, authority);
    b.extend_from_slice(&[0x0f, 31 - 15]); // content-type
    hpack_string(&mut b, "application/grpc");
    b.push(0); // a new name
    hpack_string(&mut b, "te");
    hpack_string(&mut b, "trailers");
    b
}

/// What the server answered stream 1.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// HEADERS and DATA: the DATA bytes, with the trailers' END_STREAM.
    Message(Vec<u8>),
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code, or the connection closed (None).
    Closed(Option<u32>),
}

/// GetInfo on `socket` with `:authority` `authority`, frames by hand.
fn get_info(socket: &Path, authority: &str) -> Answer {
    let mut s = UnixStream::connect(socket).expect("the registration socket accepts");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = PREFACE.to_vec();
    put_frame(&mut out, SETTINGS, 0, 0, &[]);
    put_frame(
        &mut out,
        HEADERS,
        END_HEADERS,
        1,
        &get_info_headers(authority),
    );
    // An InfoRequest has no fields: a message of 0 bytes, uncompressed.
    put_frame(&mut out, DATA, END_STREAM, 1, &[0, 0, 0, 0, 0]);
    s.write_all(&out).unwrap();

    let mut data = Vec::new();
    let mut headers = 0;
    loop {
        let mut head = [0u8; 9];
        if s.read_exact(&mut head).is_err() {
            return Answer::Closed(None);
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).expect("a whole frame");
        let code = || u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        match (kind, stream) {
            (SETTINGS, 0) if flags & ACK == 0 => {
                let mut ack = Vec::new();
                put_frame(&mut ack, SETTINGS, ACK, 0, &[]);
                s.write_all(&ack).unwrap();
            }
            (GOAWAY, 0) => {
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                return Answer::Closed(Some(code));
            }
            (RST_STREAM, 1) => return Answer::Reset(code()),
            (HEADERS, 1) => headers += 1,
            (DATA, 1) => data.extend_from_slice(&payload),
            _ => {}
        }
        if stream == 1 && flags & END_STREAM != 0 {
            // The response's HEADERS, then the trailers' HEADERS.
            assert_eq!(headers, 2, "response headers and trailers");
            return Answer::Message(data);
        }
    }
}

/// The PluginInfo of a gRPC message: (type, name, endpoint, versions).
fn plugin_info(message: &[u8]) -> (String, String, String, Vec<String>) {
    assert!(message.len() >= 5, "{message:?}");
    assert_eq!(message[0], 0, "not compressed");
    let n = u32::from_be_bytes([message[1], message[2], message[3], message[4]]) as usize;
    assert_eq!(message.len(), 5 + n, "one message");
    let d = Decoded::parse(&message[5..]).expect("a PluginInfo");
    let f = |n| KUBELET_PLUGINREGISTRATION_V1.field("PluginInfo", n);
    (
        d.string(f("type")),
        d.string(f("name")),
        d.string(f("endpoint")),
        d.strings(f("supported_versions")),
    )
}

/// grpc-go's authority for a bare path (clientconn.go `encodeAuthority`):
/// the path with `/` percent-encoded.
fn grpc_go_authority(path: &Path) -> String {
    path.to_str().unwrap().replace('/', "%2F")
}

/// `p2p-host dra driver` on a copy of the nested-switch tree, claims from a
/// directory.
fn driver() -> (Dirs, Plugin) {
    let d = Dirs::new();
    let tree = plain_tree(&d.root);
    let p = start(&d, &tree, &[]);
    (d, p)
}

#[test]
fn get_info_with_the_percent_encoded_socket_path_as_authority_is_answered() {
    let (d, _p) = driver();
    let reg = d.reg_socket();
    let want = (
        "DRAPlugin".to_string(),
        DRIVER.to_string(),
        d.dra_socket().to_str().unwrap().to_string(),
        vec![
            "v1.DRAPlugin".to_string(),
            "v1beta1.DRAPlugin".to_string(),
            "v1.DRAResourceHealth".to_string(),
        ],
    );
    let authority = grpc_go_authority(&reg);
    assert!(authority.starts_with("%2F"), "{authority}");
    for a in [authority.as_str(), "localhost", "example:80"] {
        match get_info(&reg, a) {
            Answer::Message(m) => assert_eq!(plugin_info(&m), want, "{a}"),
            // Without the shim, h2 answers the first with
            // Reset(PROTOCOL_ERROR).
            other => panic!(":authority {a}: {other:?}, not PluginInfo"),
        }
    }
    // And the plugin watcher's two calls through tonic's client.
    let info = rt().block_on(register(&reg, None));
    assert_eq!(info.name, DRIVER);
}

#[test]
fn a_connection_the_shim_cannot_follow_is_closed_and_the_driver_serves_on() {
    let (d, _p) = driver();
    let reg = d.reg_socket();
    // A client may not push (RFC 9113 §8.4): the shim closes the connection.
    let mut s = UnixStream::connect(&reg).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut out = PREFACE.to_vec();
    put_frame(&mut out, SETTINGS, 0, 0, &[]);
    put_frame(&mut out, PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]);
    s.write_all(&out).unwrap();
    let mut rest = Vec::new();
    // The server's SETTINGS may come first; then the end of the connection.
    let _ = s.read_to_end(&mut rest);
    drop(s);
    match get_info(&reg, &grpc_go_authority(&reg)) {
        Answer::Message(m) => assert_eq!(plugin_info(&m).1, DRIVER),
        other => panic!("after a closed connection: {other:?}"),
    }
}
