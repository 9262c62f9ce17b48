//! The shim's tests: frames and header blocks by hand, through [`rewrite`](super::rewrite).

use super::frames::{END_STREAM, PADDED, PRIORITY};
use super::*;
use loona_hpack::{Decoder, Encoder};

/// A frame, by hand (RFC 9113 §4.1).
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A frame of the output: (type, flags, stream, payload).
type Frame = (u8, u8, u32, Vec<u8>);

/// The frames of `bytes`, after the preface.
fn frames(bytes: &[u8]) -> Vec<Frame> {
    assert_eq!(&bytes[..24], PREFACE);
    let mut rest = &bytes[24..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let n = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let stream = u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]);
        out.push((rest[3], rest[4], stream, rest[9..9 + n].to_vec()));
        rest = &rest[9 + n..];
    }
    out
}

fn run(input: &[u8]) -> Result<Vec<u8>, RewriteError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut out = Vec::new();
    rt.block_on(rewrite(input, &mut out))?;
    Ok(out)
}

fn owned(list: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    list.iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

fn request(authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    owned(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/pluginregistration.Registration/GetInfo"),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ])
}

fn with_authority(list: &[(Vec<u8>, Vec<u8>)], authority: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    list.iter()
        .map(|(n, v)| {
            let v = if n == b":authority" {
                authority.as_bytes().to_vec()
            } else {
                v.clone()
            };
            (n.clone(), v)
        })
        .collect()
}

fn encode(e: &mut Encoder<'static>, list: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    e.encode(list.iter().map(|(n, v)| (&n[..], &v[..])))
}

/// The preface and `list` in stream 1's HEADERS frame, encoded by a
/// fresh encoder.
fn opening(list: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut input = PREFACE.to_vec();
    input.extend(frame(
        HEADERS,
        END_HEADERS,
        1,
        &encode(&mut Encoder::new(), list),
    ));
    input
}

const SETTINGS: u8 = 0x4;
const DATA: u8 = 0x0;

/// A client's SETTINGS (ENABLE_PUSH 0, INITIAL_WINDOW_SIZE 65535).
fn settings() -> Vec<u8> {
    frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0xff, 0xff])
}

/// A gRPC message of no bytes, uncompressed.
fn empty_message() -> Vec<u8> {
    frame(DATA, END_STREAM, 1, &[0, 0, 0, 0, 0])
}

/// Decodes the header blocks of `out`'s frames in order with one
/// decoder (as the server does), checking the framing; returns the
/// non-header frames and the header lists with their HEADERS flags.
#[allow(clippy::type_complexity)]
fn split(out: &[u8]) -> (Vec<Frame>, Vec<(u32, u8, Vec<(Vec<u8>, Vec<u8>)>)>) {
    let mut decoder = Decoder::new();
    let mut other = Vec::new();
    let mut lists = Vec::new();
    let mut open: Option<(u32, u8, Vec<u8>)> = None;
    for (kind, flags, stream, payload) in frames(out) {
        assert!(payload.len() <= MAX_FRAME);
        match kind {
            HEADERS => {
                assert!(open.is_none());
                assert_eq!(flags & PADDED, 0, "no padding is sent");
                let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                open = Some((stream, flags, payload[skip..].to_vec()));
            }
            CONTINUATION => {
                let (s, _, block) = open.as_mut().expect("a block is open");
                assert_eq!(*s, stream);
                block.extend_from_slice(&payload);
            }
            _ => {
                assert!(open.is_none(), "a frame inside a header block");
                other.push((kind, flags, stream, payload));
                continue;
            }
        }
        if flags & END_HEADERS != 0 {
            let (s, f, block) = open.take().unwrap();
            lists.push((s, f, decoder.decode(&block).unwrap()));
        }
    }
    assert!(open.is_none());
    (other, lists)
}

#[test]
fn a_percent_encoded_authority_becomes_localhost_and_the_rest_passes_unchanged() {
    let mut e = Encoder::new();
    let sent = request("%2Ftmp%2Fx.sock");
    let block = encode(&mut e, &sent);
    let mut input = PREFACE.to_vec();
    input.extend(settings());
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    input.extend(empty_message());
    input.extend(frame(SETTINGS, 0x1, 0, &[])); // an ACK
    let out = run(&input).unwrap();
    let (other, lists) = split(&out);
    assert_eq!(
        other,
        [
            (SETTINGS, 0, 0, settings()[9..].to_vec()),
            (DATA, END_STREAM, 1, vec![0; 5]),
            (SETTINGS, 0x1, 0, vec![]),
        ]
    );
    assert_eq!(
        lists,
        [(1, END_HEADERS, with_authority(&sent, "localhost"))]
    );
    // Byte for byte around the header block.
    let settings_len = settings().len();
    assert_eq!(out[..24 + settings_len], input[..24 + settings_len]);
    let tail = empty_message().len() + 9;
    assert_eq!(out[out.len() - tail..], input[input.len() - tail..]);
}

#[test]
fn valid_authorities_are_left_alone() {
    for authority in ["localhost", "example:80", "[::1]:50051", "gpu.vp2p.io"] {
        let sent = request(authority);
        let input = opening(&sent);
        let (_, lists) = split(&run(&input).unwrap());
        assert_eq!(lists, [(1, END_HEADERS, sent)], "{authority}");
    }
}

/// RFC 7541 §5.2: a string literal without Huffman coding of `s`
/// (shorter than 127 bytes).
fn literal(s: &str) -> Vec<u8> {
    assert!(s.len() < 127);
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

/// A request's header block written by hand (RFC 7541 §6.1, §6.2 and
/// Appendix A's static table), `:authority` literal with incremental
/// indexing (§6.2.1) so the next block can refer to it.
fn by_hand(authority: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST (3), :scheme http (6)
    b.push(0x04); // §6.2.2: without indexing, name :path (4)
    b.extend(literal("/pluginregistration.Registration/GetInfo"));
    b.push(0x41); // §6.2.1: with incremental indexing, name :authority (1)
    b.extend(literal(authority));
    b.push(0x0f); // §6.2.2, name content-type (31 = 15 + 16)
    b.push(0x10);
    b.extend(literal("application/grpc"));
    b.push(0x10); // §6.2.3: never indexed, new name
    b.extend(literal("te"));
    b.extend(literal("trailers"));
    b
}

#[test]
fn a_block_written_by_hand_decodes_with_the_clients_dynamic_table() {
    let authority = "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fgpu.vp2p.io-reg.sock";
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, END_HEADERS, 1, &by_hand(authority)));
    // The second request refers to the first's :authority by its
    // dynamic table index (62: §2.3.3, the first after the static 61).
    let second = [0x83, 0x86, 0x84, 0xbe];
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
    let (other, lists) = split(&run(&input).unwrap());
    assert!(other.is_empty());
    let first = owned(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/pluginregistration.Registration/GetInfo"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    let second = owned(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "localhost"),
    ]);
    assert_eq!(
        lists,
        [
            (1, END_HEADERS, first),
            (3, END_HEADERS | END_STREAM, second)
        ]
    );
}

#[test]
fn continuation_frames_padding_and_priority_are_joined_and_sent_as_one_block() {
    let mut e = Encoder::new();
    let mut sent = request("%2Ftmp%2Fx.sock");
    sent.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
    let block = encode(&mut e, &sent);
    assert!(block.len() > 2 * MAX_FRAME);
    // HEADERS padded and with PRIORITY, then two CONTINUATION frames.
    let (a, rest) = block.split_at(100);
    let (b, c) = rest.split_at(30_000);
    let mut payload = vec![7u8]; // pad length
    payload.extend([0x80, 0, 0, 3, 15]); // exclusive, depends on 3, weight 15
    payload.extend_from_slice(a);
    payload.extend([0; 7]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 5, &payload));
    input.extend(frame(CONTINUATION, 0, 5, b));
    input.extend(frame(CONTINUATION, END_HEADERS, 5, c));
    let out = run(&input).unwrap();
    let raw = frames(&out);
    assert_eq!(raw[0].0, HEADERS);
    assert_eq!(raw[0].1, PRIORITY | END_STREAM);
    assert_eq!(raw[0].3[..5], [0x80, 0, 0, 3, 15]);
    assert_eq!(raw[0].3.len(), MAX_FRAME);
    assert!(raw[1..].iter().all(|f| f.0 == CONTINUATION && f.2 == 5));
    assert_eq!(raw.last().unwrap().1, END_HEADERS);
    let (other, lists) = split(&out);
    assert!(other.is_empty());
    assert_eq!(
        lists,
        [(5, PRIORITY | END_STREAM, with_authority(&sent, "localhost"))]
    );
}

#[test]
fn a_small_padded_block_is_one_headers_frame_without_padding() {
    let sent = request("%2Ftmp%2Fx.sock");
    let block = encode(&mut Encoder::new(), &sent);
    let mut payload = vec![3u8];
    payload.extend(&block);
    payload.extend([0; 3]);
    let mut input = PREFACE.to_vec();
    input.extend(frame(HEADERS, PADDED | END_HEADERS, 1, &payload));
    let (_, lists) = split(&run(&input).unwrap());
    assert_eq!(
        lists,
        [(1, END_HEADERS, with_authority(&sent, "localhost"))]
    );
}

#[test]
fn what_the_shim_cannot_follow_closes_the_connection() {
    let with = |frames: &[Vec<u8>]| {
        let mut input = PREFACE.to_vec();
        for f in frames {
            input.extend(f);
        }
        run(&input).unwrap_err().to_string()
    };
    let block = encode(&mut Encoder::new(), &request("x"));
    // Padding longer than the payload.
    assert!(with(&[frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 1, 2])]).contains("padding"));
    // PRIORITY without its fields.
    assert!(with(&[frame(HEADERS, PRIORITY | END_HEADERS, 1, &[1, 2])]).contains("PRIORITY"));
    // Another frame inside a header block.
    let e = with(&[frame(HEADERS, 0, 1, &block), settings()]);
    assert!(e.contains("inside the header block of stream 1"), "{e}");
    let e = with(&[
        frame(HEADERS, 0, 1, &block),
        frame(CONTINUATION, END_HEADERS, 3, &[]),
    ]);
    assert!(e.contains("inside the header block"), "{e}");
    assert!(with(&[frame(CONTINUATION, END_HEADERS, 1, &block)]).contains("outside"));
    assert!(with(&[frame(PUSH_PROMISE, END_HEADERS, 1, &block)]).contains("PUSH_PROMISE"));
    // An index past the tables (RFC 7541 §2.3.3).
    let e = with(&[frame(HEADERS, END_HEADERS, 1, &[0xff, 0x7f])]);
    assert!(e.contains("does not decode"), "{e}");
    // A table size over the server's (§4.2, §6.3): 4097.
    let e = with(&[frame(HEADERS, END_HEADERS, 1, &[0x3f, 0xe2, 0x1f, 0x82])]);
    assert!(e.contains("does not decode"), "{e}");
    // A block over the bound, in one frame or joined.
    let big = vec![0; MAX_BLOCK + 1];
    assert!(with(&[frame(HEADERS, END_HEADERS, 1, &big)]).contains("over"));
    let half = vec![0; MAX_BLOCK / 2 + 1];
    let e = with(&[
        frame(HEADERS, 0, 1, &half),
        frame(CONTINUATION, 0, 1, &half),
    ]);
    assert!(e.contains("over 1048576 bytes"), "{e}");
    // A small block that refers to a big entry again and again.
    let mut b = vec![0x40];
    b.extend(literal("x"));
    b.extend([0x7f, 0xa1, 0x1e]); // a 4000-byte value (127 + 33 + 30 * 128)
    b.extend(vec![b'v'; 4000]);
    b.extend(vec![0xbe; 300]);
    let e = with(&[frame(HEADERS, END_HEADERS, 1, &b)]);
    assert!(e.contains("decodes to over"), "{e}");
    // Not HTTP/2.
    let e = run(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_err();
    assert!(matches!(e, RewriteError::Preface), "{e}");
    // Cut inside a frame.
    let mut cut = PREFACE.to_vec();
    cut.extend(&empty_message()[..11]);
    assert!(matches!(run(&cut).unwrap_err(), RewriteError::Truncated));
    let mut cut = PREFACE.to_vec();
    cut.extend(frame(HEADERS, 0, 1, &block));
    assert!(matches!(run(&cut).unwrap_err(), RewriteError::Truncated));
}

#[test]
fn an_empty_connection_ends_quietly() {
    assert_eq!(run(b"").unwrap(), b"");
    assert_eq!(run(PREFACE).unwrap(), PREFACE);
}

#[test]
fn the_validity_check_is_h2s() {
    assert!(is_valid_authority(b"localhost"));
    assert!(is_valid_authority(b"example:80"));
    assert!(!is_valid_authority(b"%2Ftmp%2Fx.sock"));
    assert!(!is_valid_authority(b"/tmp/x.sock"));
    assert!(!is_valid_authority(b""));
}

static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

#[test]
fn connections_are_relayed_both_ways_and_a_refusal_is_logged_with_the_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("reg.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = UnixListener::bind(&path).unwrap();
        let mut accepted = Box::pin(incoming(listener, path.clone(), |m| {
            LOGGED.lock().unwrap().push(m.to_string())
        }));
        // The server's side: reads to the end, answers, closes.
        let server = async {
            let mut end = accepted.next().await.unwrap().unwrap();
            let mut got = Vec::new();
            end.read_to_end(&mut got).await.unwrap();
            end.write_all(b"the server's bytes").await.unwrap();
            end.shutdown().await.unwrap();
            drop(end);
            (got, accepted)
        };
        let sent = request("%2Ftmp%2Fx.sock");
        let mut input = opening(&sent);
        input.extend(empty_message());
        let client = async {
            let mut c = UnixStream::connect(&path).await.unwrap();
            c.write_all(&input).await.unwrap();
            c.shutdown().await.unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).await.unwrap();
            back
        };
        let ((got, mut accepted), back) = tokio::join!(server, client);
        assert_eq!(back, b"the server's bytes");
        let (other, lists) = split(&got);
        assert_eq!(
            lists,
            [(1, END_HEADERS, with_authority(&sent, "localhost"))]
        );
        assert_eq!(other, [(DATA, END_STREAM, 1, vec![0; 5])]);

        // A PUSH_PROMISE: the connection is closed, and logged.
        let server = async { accepted.next().await.unwrap().unwrap() };
        let client = async {
            let mut c = UnixStream::connect(&path).await.unwrap();
            let mut bad = PREFACE.to_vec();
            bad.extend(frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x82]));
            c.write_all(&bad).await.unwrap();
            let mut back = Vec::new();
            let _ = c.read_to_end(&mut back).await;
            back
        };
        let (_end, back) = tokio::join!(server, client);
        assert!(back.is_empty());
    });
    let logged = LOGGED.lock().unwrap().clone();
    assert_eq!(
        logged,
        [format!(
            "{}: closed a client's connection: a PUSH_PROMISE frame from the client",
            path.display()
        )]
    );
}

#[test]
fn many_blocks_keep_both_contexts_in_step() {
    let mut e = Encoder::new();
    let mut input = PREFACE.to_vec();
    let mut want = Vec::new();
    for i in 0..200u32 {
        let mut list = request(if i % 2 == 0 { "%2Fa" } else { "localhost" });
        list.push((
            format!("x-n{}", i % 7).into_bytes(),
            i.to_string().into_bytes(),
        ));
        let stream = 2 * i + 1;
        input.extend(frame(HEADERS, END_HEADERS, stream, &encode(&mut e, &list)));
        want.push((stream, END_HEADERS, with_authority(&list, "localhost")));
    }
    let (_, lists) = split(&run(&input).unwrap());
    assert_eq!(lists, want);
}
