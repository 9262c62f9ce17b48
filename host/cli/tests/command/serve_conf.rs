//! `p2p-host serve` given hostile input (issue "Hostile input"): socket paths
//! a unix address cannot hold, conf lines of 20 MB, capture files that are
//! devices, directories or too large, a socket given to two GPUs; and how it
//! stops: SIGTERM with an idle client connected, sockets never left behind.
//!
//! Every run of the binary is bounded: 2 GiB of address space
//! (`RLIMIT_AS`), so a read that never ends fails instead of taking the
//! machine's memory, and 20 s of wall time, after which it is killed and the
//! test fails.

use p2p_test_support::process::SpawnOwned;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use p2p_test_support::vfio_user_client::{Raw, H200};

/// The exit status the unit does not restart on (EX_CONFIG, sysexits.h).
const EX_CONFIG: i32 = 78;

/// `p2p-host serve ARGS`, its address space bounded to 2 GiB.
fn command(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_p2p-host"));
    c.arg("serve").args(args);
    // SAFETY: setrlimit is async-signal-safe and touches only the child,
    // between fork and exec; the struct lives across the call.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// Runs serve to its end (killed after 20 s): exit code, stderr, how long it took.
fn run_to_end(args: &[&str]) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let mut child = command(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_owned()
        .expect("p2p-host runs");
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut { err }, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve {args:?} was still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    let err = reader.join().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&err).into_owned(),
        took,
    )
}

/// A conf file in `dir` holding `text`.
fn conf(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("vm1.conf");
    std::fs::write(&p, text).unwrap();
    p
}

fn serve_conf(conf: &Path) -> (Option<i32>, String, Duration) {
    run_to_end(&["--gpus-from", conf.to_str().unwrap()])
}

/// Files left in `dir` that serve made: sockets and its private directories.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sock") || n.starts_with(".vp2p"))
        .collect()
}

#[test]
fn a_socket_path_a_unix_address_cannot_hold_is_refused_at_start_naming_its_line() {
    let h200 = H200::unpack();
    let dir = tempfile::tempdir().unwrap();
    let config = h200.config().display().to_string();
    // 108 bytes: one more than sun_path holds with its NUL (unix(7)).
    let base = dir.path().join("gpu1-");
    let pad = 108 - base.as_os_str().len() - ".sock".len();
    let long = format!("{}{}.sock", base.display(), "x".repeat(pad));
    assert_eq!(long.len(), 108);
    let short = dir.path().join("gpu0.sock");
    let c = conf(
        dir.path(),
        &format!(
            "socket={},config={config},clique=0\nsocket={long},config={config},clique=1\n",
            short.display()
        ),
    );
    let (code, err, _) = serve_conf(&c);
    assert_eq!(code, Some(EX_CONFIG), "{err}");
    assert!(
        err.contains(&format!("{}:2: socket '", c.display())),
        "names the conf line: {err}"
    );
    assert!(
        err.contains("is 108 bytes; a unix socket address holds at most 107"),
        "{err}"
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

/// Waits for the ready line; returns what stderr said up to it.
fn ready(child: &mut Child) -> String {
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        text.push_str(&line);
        if line.contains("ready:") {
            // Keep draining, so the server never blocks on a full pipe.
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut err, &mut std::io::sink());
            });
            return text;
        }
    }
    let _ = child.kill();
    panic!("serve did not get ready: {text}");
}

/// SIGTERM, then how long until the process has exited, and its code.
fn sigterm(child: &mut Child) -> (Option<i32>, Duration) {
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code(), t0.elapsed());
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve was still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sigterm_with_an_idle_client_connected_exits_0_within_a_second_leaving_no_socket() {
    let h200 = H200::unpack();
    let dir = tempfile::tempdir().unwrap();
    let config = h200.config().display().to_string();
    let sockets: Vec<PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("gpu{i}.sock")))
        .collect();
    let text: String = sockets
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "socket={},config={config},clique={i},max-bar=256M\n",
                s.display()
            )
        })
        .collect();
    let c = conf(dir.path(), &text);
    let mut child = command(&["--gpus-from", c.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    let said = ready(&mut child);
    assert!(said.contains("ready: 3 GPU(s) listening"), "{said}");
    // One client, past its handshake, then idle.
    let mut idle = Raw::connect(&sockets[1]);
    assert_eq!(idle.version().errno(), None);
    let (code, took) = sigterm(&mut child);
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(1), "exit took {took:?}");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    // The client sees its connection end.
    assert!(idle.recv().is_none());
}

#[test]
fn a_socket_in_a_directory_near_the_address_limit_is_served_and_stopped() {
    // The socket path fits (107 bytes), but its directory leaves no room for
    // the private directories serve binds in; they go through the
    // directory's descriptor instead.
    let h200 = H200::unpack();
    let top = tempfile::tempdir().unwrap();
    let name = "g.sock";
    let room = 107 - top.path().as_os_str().len() - 1 - name.len() - 1;
    let dir = top.path().join("d".repeat(room));
    std::fs::create_dir(&dir).unwrap();
    let sock = dir.join(name);
    assert_eq!(sock.as_os_str().len(), 107);
    let spec = format!(
        "socket={},config={},clique=2,max-bar=256M",
        sock.display(),
        h200.config().display()
    );
    let mut child = command(&["--gpu", &spec])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn_owned()
        .unwrap();
    ready(&mut child);
    let mut c = Raw::connect(&sock);
    assert_eq!(c.version().errno(), None);
    assert_eq!(c.config_dword(0xcc), (2 << 19) | 0x5032, "the capability");
    let (code, took) = sigterm(&mut child);
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(1), "exit took {took:?}");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

/// Serves a conf of `lines` (with `{config}`, `{sock}`, `{sock1}`, `{dir}`
/// standing for the captured H200's config, two sockets and a directory):
/// it must exit 78 and say `want` (`CONF` standing for the conf's path).
fn refused_with_78(lines: &str, want: &str) {
    let h200 = H200::unpack();
    let dir = tempfile::tempdir().unwrap();
    let text = lines
        .replace("{config}", &h200.config().display().to_string())
        .replace(
            "{sock}",
            &dir.path().join("gpu0.sock").display().to_string(),
        )
        .replace(
            "{sock1}",
            &dir.path().join("gpu1.sock").display().to_string(),
        )
        .replace("{dir}", &dir.path().display().to_string());
    let c = conf(dir.path(), &text);
    let (code, err, _) = serve_conf(&c);
    let want = want
        .replace("CONF", &c.display().to_string())
        .replace("{dir}", &dir.path().display().to_string())
        .replace(
            "{sock}",
            &dir.path().join("gpu0.sock").display().to_string(),
        );
    assert!(err.contains(&want), "want {want:?}, got {err}");
    assert_eq!(code, Some(EX_CONFIG), "{text}: {err}");
    assert!(leftovers(dir.path()).is_empty(), "{text}");
}

#[test]
fn a_socket_given_to_two_gpus_exits_78_naming_both_lines() {
    refused_with_78(
        "socket={sock},config={config},clique=0\n# spare\nsocket={sock1},config={config},clique=1\nsocket={sock},config={config},clique=2\n",
        "socket {sock}: given to two GPUs (CONF:1 and CONF:4)",
    );
}

#[test]
fn a_missing_config_exits_78_naming_the_line() {
    refused_with_78(
        "# vm1\nsocket={sock},config={dir}/missing/config,clique=0\n",
        "CONF:2: gpu0: reading {dir}/missing/config: No such file or directory",
    );
}

#[test]
fn a_directory_as_config_exits_78() {
    refused_with_78(
        "socket={sock},config={dir},clique=0\n",
        "CONF:1: gpu0: {dir}: not a regular file (a directory)",
    );
}

#[test]
fn dev_null_as_resource_exits_78() {
    refused_with_78(
        "socket={sock},config={config},resource=/dev/null,clique=0\n",
        "CONF:1: gpu0: /dev/null: not a regular file (a character device)",
    );
}

#[test]
fn dev_zero_as_config_is_not_read_and_exits_78() {
    refused_with_78(
        "socket={sock},config=/dev/zero,clique=0\n",
        "CONF:1: gpu0: /dev/zero: not a regular file (a character device)",
    );
}

#[test]
fn dev_zero_as_resource_is_not_read_and_exits_78() {
    refused_with_78(
        "socket={sock},config={config},resource=/dev/zero,clique=0\n",
        "CONF:1: gpu0: /dev/zero: not a regular file (a character device)",
    );
}

#[test]
fn an_oversized_config_is_not_read_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big-config");
    std::fs::write(&big, vec![0u8; 8192]).unwrap();
    refused_with_78(
        &format!("socket={{sock}},config={},clique=0\n", big.display()),
        &format!("CONF:1: gpu0: {}: larger than 4096 bytes", big.display()),
    );
}

#[test]
fn long_conf_lines_are_quoted_as_a_short_prefix_once() {
    let dir = tempfile::tempdir().unwrap();
    // A 20 MB line: the conf is larger than a conf may be, said in one line.
    let c = conf(
        dir.path(),
        &format!(
            "socket=/tmp/x.sock,config={},clique=1\n",
            "c".repeat(20 << 20)
        ),
    );
    let (code, err, _) = serve_conf(&c);
    assert_eq!(code, Some(EX_CONFIG), "{}", &err[..err.len().min(300)]);
    assert!(err.len() < 1024, "{} bytes on stderr", err.len());
    assert!(err.contains(": larger than 1048576 bytes"), "{err}");
    // Lines of 1,000,000 bytes fit the conf: each is quoted by a short prefix, once.
    let long = "c".repeat(1_000_000);
    for line in [
        format!("socket=/tmp/x.sock,config=/{long},clique=1"),
        format!("socket=/tmp/{long},config=/c,clique=1"),
        long.clone(),
        format!("socket=/tmp/x.sock,config=/c,clique=1,{long}=1"),
    ] {
        let c = conf(dir.path(), &format!("{line}\n"));
        let (code, err, _) = serve_conf(&c);
        assert_eq!(code, Some(EX_CONFIG), "{}", &err[..err.len().min(300)]);
        assert!(err.len() < 1024, "{} bytes on stderr", err.len());
        // Quoted once, by a prefix that ends in "...".
        assert_eq!(err.matches(&"c".repeat(40)).count(), 1, "{err}");
        assert_eq!(err.matches("...").count(), 1, "{err}");
        assert!(err.contains(&format!("{}:1: ", c.display())), "{err}");
    }
}
