//! `--gpu socket=PATH,config=FILE,clique=N[,resource=FILE][,max-bar=SIZE][,allow-non-nvidia][,any-offset]`
//! (a captured GPU) or `--gpu socket=PATH,vfio=BDF,clique=N[,allow-non-nvidia][,any-offset]`
//! (a device bound to vfio-pci).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use p2p_topology::ByteSize;
use p2p_topology::{Bdf, Clique};

use super::error::{ServeError, SpecError, SpecFileError};
use super::limits::SOCKET_PATH_MAX;
use super::limits::{prefix, quote, read_limited, CONF_MAX};

/// Longest file path a key takes (`PATH_MAX` is 4096 with the NUL).
const PATH_MAX: usize = 4095;

/// One GPU to serve: where, what, with which clique.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSpec {
    /// The vfio-user socket to create.
    pub socket: PathBuf,
    /// A captured config space (sysfs `config`, 256 or 4096 bytes); None
    /// with `vfio`.
    pub config: Option<PathBuf>,
    /// A function bound to vfio-pci to serve for real; None with `config`.
    pub vfio: Option<Bdf>,
    /// The P2P clique the served capability carries (0-15).
    pub clique: Clique,
    /// The sysfs `resource` file with the BAR sizes; default: `resource` next to `config`.
    pub resource: Option<PathBuf>,
    /// Scale every memory BAR larger than this down to it (a power of two).
    pub max_bar: Option<u64>,
    /// Accept a function that is not an NVIDIA display controller.
    pub allow_non_nvidia: bool,
    /// Place the capability at the first free dword when 0xC8 and 0xD4 are taken.
    pub any_offset: bool,
}

/// Smallest `max-bar`: one page.
pub const MIN_MAX_BAR: u64 = 4096;

impl FromStr for GpuSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        let mut socket = None;
        let mut config = None;
        let mut vfio = None;
        let mut clique = None;
        let mut resource = None;
        let mut max_bar = None;
        let mut allow_non_nvidia = false;
        let mut any_offset = false;
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, val) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None if item == "allow-non-nvidia" || item == "any-offset" => (item, None),
                None => return Err(SpecError::NotKeyValue(quote(item).into_owned())),
            };
            if seen.contains(&key) {
                return Err(SpecError::Duplicate(quote(key).into_owned()));
            }
            seen.push(key);
            let need = || {
                val.filter(|v| !v.is_empty())
                    .ok_or_else(|| SpecError::NotKeyValue(quote(item).into_owned()))
            };
            let path = |key: &'static str| {
                let v = need()?;
                if v.len() > PATH_MAX {
                    return Err(SpecError::PathTooLong {
                        key,
                        path: prefix(v),
                        len: v.len(),
                    });
                }
                Ok(PathBuf::from(v))
            };
            match key {
                "socket" => {
                    let v = need()?;
                    if v.len() > SOCKET_PATH_MAX {
                        return Err(SpecError::SocketTooLong {
                            path: prefix(v),
                            len: v.len(),
                        });
                    }
                    socket = Some(PathBuf::from(v));
                }
                "config" => config = Some(path("config")?),
                "vfio" => {
                    let v = need()?;
                    vfio = Some(
                        v.parse::<Bdf>()
                            .map_err(|_| SpecError::BadBdf(quote(v).into_owned()))?,
                    );
                }
                "resource" => resource = Some(path("resource")?),
                "clique" => clique = Some(parse_clique(need()?)?),
                "max-bar" => max_bar = Some(parse_bar_size(need()?)?),
                "allow-non-nvidia" => allow_non_nvidia = flag(item, val)?,
                "any-offset" => any_offset = flag(item, val)?,
                other => return Err(SpecError::UnknownKey(quote(other).into_owned())),
            }
        }
        match (&config, &vfio) {
            (None, None) => return Err(SpecError::Missing("config or vfio")),
            (Some(_), Some(_)) => return Err(SpecError::Conflict("config", "vfio")),
            (None, Some(_)) => {
                for key in ["resource", "max-bar"] {
                    if seen.contains(&key) {
                        return Err(SpecError::Conflict(key, "vfio"));
                    }
                }
            }
            (Some(_), None) => {}
        }
        Ok(GpuSpec {
            socket: socket.ok_or(SpecError::Missing("socket"))?,
            config,
            vfio,
            clique: clique.ok_or(SpecError::Missing("clique"))?,
            resource,
            max_bar,
            allow_non_nvidia,
            any_offset,
        })
    }
}

/// Where a GPU spec was given: the Nth `--gpu` (from 1) or a conf file's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecOrigin {
    /// The Nth `--gpu` on the command line (or the short form, after them).
    Arg(usize),
    /// A line of a conf file (`--gpus-from`).
    Line {
        /// The conf file.
        path: PathBuf,
        /// The line, counting from 1.
        line: usize,
    },
}

impl fmt::Display for SpecOrigin {
    /// `--gpu #2`, or `FILE:LINE` as compilers write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecOrigin::Arg(n) => write!(f, "--gpu #{n}"),
            SpecOrigin::Line { path, line } => write!(f, "{}:{line}", path.display()),
        }
    }
}

/// A GPU spec and where it was given, so later errors can name the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcedSpec {
    /// Where it was given.
    pub origin: SpecOrigin,
    /// The spec.
    pub spec: GpuSpec,
}

/// Reads a file of GPU specs: one `--gpu` value a line; `#` starts a comment,
/// blank lines are skipped. What `p2p-host-serve@NAME.service` serves from
/// `/etc/vp2p/serve/NAME.conf`. Only a regular file of at most
/// [`CONF_MAX`] bytes is read.
pub fn read_spec_file(path: &Path) -> Result<Vec<SourcedSpec>, SpecFileError> {
    let bytes = read_limited(path, CONF_MAX).map_err(|e| SpecFileError::Read {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let text = String::from_utf8(bytes).map_err(|e| SpecFileError::Read {
        path: path.to_path_buf(),
        why: format!(
            "not UTF-8 text (byte {} is not part of a UTF-8 character)",
            e.utf8_error().valid_up_to()
        ),
    })?;
    parse_spec_file(path, &text)
}

/// [`read_spec_file`] on text already read (`path` names it in errors).
/// Sockets given twice in the file are refused here, naming both lines.
pub fn parse_spec_file(path: &Path, text: &str) -> Result<Vec<SourcedSpec>, SpecFileError> {
    let mut specs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let spec = line.parse().map_err(|error| SpecFileError::Line {
            path: path.to_path_buf(),
            line: i + 1,
            error,
        })?;
        specs.push(SourcedSpec {
            origin: SpecOrigin::Line {
                path: path.to_path_buf(),
                line: i + 1,
            },
            spec,
        });
    }
    if specs.is_empty() {
        return Err(SpecFileError::Empty(path.to_path_buf()));
    }
    Ok(specs)
}

/// Refuses a socket given to two GPUs, naming where each was given.
pub fn check_distinct_sockets(specs: &[SourcedSpec]) -> Result<(), ServeError> {
    for (i, b) in specs.iter().enumerate() {
        if let Some(a) = specs[..i].iter().find(|a| a.spec.socket == b.spec.socket) {
            return Err(ServeError::DuplicateSocket {
                path: b.spec.socket.clone(),
                first: a.origin.to_string(),
                second: b.origin.to_string(),
            });
        }
    }
    Ok(())
}

/// A boolean key: bare, or `=true|on|yes|1` / `=false|off|no|0`.
fn flag(item: &str, val: Option<&str>) -> Result<bool, SpecError> {
    match val {
        None | Some("true" | "on" | "yes" | "1") => Ok(true),
        Some("false" | "off" | "no" | "0") => Ok(false),
        Some(_) => Err(SpecError::NotKeyValue(quote(item).into_owned())),
    }
}

/// A clique id, 0..=15.
pub fn parse_clique(s: &str) -> Result<Clique, SpecError> {
    s.parse::<u8>()
        .ok()
        .and_then(|n| Clique::new(n).ok())
        .ok_or_else(|| SpecError::BadClique(quote(s).into_owned()))
}

/// A BAR size as [`ByteSize`] reads it; it must be a power of two of at
/// least [`MIN_MAX_BAR`].
pub fn parse_bar_size(s: &str) -> Result<u64, SpecError> {
    let bytes = s
        .parse::<ByteSize>()
        .map_err(|_| SpecError::BadSize(quote(s).into_owned()))?
        .0;
    if bytes < MIN_MAX_BAR || !bytes.is_power_of_two() {
        return Err(SpecError::BadSize(quote(s).into_owned()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_spec() {
        let s: GpuSpec = "socket=/tmp/g0.sock,config=/c/config,clique=3,resource=/c/resource,max-bar=256M,allow-non-nvidia"
            .parse()
            .unwrap();
        assert_eq!(s.socket, PathBuf::from("/tmp/g0.sock"));
        assert_eq!(s.clique.id(), 3);
        assert_eq!(s.resource, Some(PathBuf::from("/c/resource")));
        assert_eq!(s.max_bar, Some(256 << 20));
        assert!(s.allow_non_nvidia);
    }

    #[test]
    fn refuses_bad_specs() {
        let err = |s: &str| s.parse::<GpuSpec>().unwrap_err();
        assert_eq!(err("config=c,clique=1"), SpecError::Missing("socket"));
        assert_eq!(
            err("socket=s,clique=1"),
            SpecError::Missing("config or vfio")
        );
        assert_eq!(
            err("socket=s,config=c,vfio=0000:01:00.0,clique=1"),
            SpecError::Conflict("config", "vfio")
        );
        assert_eq!(
            err("socket=s,vfio=0000:01:00.0,clique=1,max-bar=256M"),
            SpecError::Conflict("max-bar", "vfio")
        );
        assert_eq!(
            err("socket=s,vfio=01:00,clique=1"),
            SpecError::BadBdf("01:00".into())
        );
        assert_eq!(
            err("socket=s,config=c,clique=16"),
            SpecError::BadClique("16".into())
        );
        assert_eq!(
            err("socket=s,config=c,clique=1,clique=2"),
            SpecError::Duplicate("clique".into())
        );
        assert_eq!(
            err("socket=s,config=c,clique=1,speed=9"),
            SpecError::UnknownKey("speed".into())
        );
        assert_eq!(
            err("socket=s,config=c,clique=1,max-bar=3M"),
            SpecError::BadSize("3M".into())
        );
        assert_eq!(
            err("socket=s,config,clique=1"),
            SpecError::NotKeyValue("config".into())
        );
        assert_eq!(
            err("socket=,config=c,clique=1"),
            SpecError::NotKeyValue("socket=".into())
        );
    }

    #[test]
    fn parses_a_vfio_spec() {
        let s: GpuSpec = "socket=/tmp/e.sock,vfio=0000:00:03.0,clique=2,allow-non-nvidia"
            .parse()
            .unwrap();
        assert_eq!(s.vfio, Some("0000:00:03.0".parse().unwrap()));
        assert_eq!(s.config, None);
        assert_eq!(s.clique.id(), 2);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bar_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_bar_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bar_size("0x10000000").unwrap(), 256 << 20);
        assert_eq!(parse_bar_size("4096").unwrap(), 4096);
        assert!(parse_bar_size("2048").is_err());
        assert!(parse_bar_size("99999999999T").is_err());
        assert!(parse_bar_size("12Q").is_err());
    }

    #[test]
    fn a_spec_file_is_one_spec_a_line_with_comments() {
        let p = Path::new("/etc/vp2p/serve/vm1.conf");
        let text = "# vm1's GPUs\n\nsocket=/run/vp2p/vm1/gpu0.sock,config=/var/lib/vp2p/gpu0.config,clique=0 # first\n  socket=/run/vp2p/vm1/gpu1.sock,config=/var/lib/vp2p/gpu1.config,clique=1\n";
        let specs = parse_spec_file(p, text).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(
            specs[0].spec.socket,
            PathBuf::from("/run/vp2p/vm1/gpu0.sock")
        );
        assert_eq!(specs[1].spec.clique.id(), 1);
        assert_eq!(specs[1].origin.to_string(), "/etc/vp2p/serve/vm1.conf:4");
    }

    #[test]
    fn a_bad_spec_file_names_the_file_and_line() {
        let p = Path::new("/etc/vp2p/serve/vm1.conf");
        let e = parse_spec_file(p, "# header\nsocket=a,config=b,clique=16\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/vp2p/serve/vm1.conf:2: clique '16': want a number 0..=15"
        );
        let e = parse_spec_file(p, "# nothing\n\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/etc/vp2p/serve/vm1.conf: no GPU spec"),
            "{e}"
        );
        let e = read_spec_file(Path::new("/nonexistent/vp2p/x.conf")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/nonexistent/vp2p/x.conf: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_socket_path_past_the_unix_address_limit_is_refused_with_its_line() {
        let p = Path::new("/etc/vp2p/serve/vm1.conf");
        // 107 bytes fit sun_path with its NUL; 108 do not (unix(7)).
        let fits = format!("/run/{}", "s".repeat(SOCKET_PATH_MAX - 5));
        assert_eq!(fits.len(), 107);
        let text = format!("socket={fits},config=/c,clique=1\nsocket={fits}x,config=/c,clique=2\n");
        let e = parse_spec_file(p, &text).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("/etc/vp2p/serve/vm1.conf:2: socket '/run/sss"),
            "{msg}"
        );
        assert!(
            msg.contains("is 108 bytes; a unix socket address holds at most 107"),
            "{msg}"
        );
    }

    #[test]
    fn a_20_mb_line_is_quoted_as_a_short_prefix_once() {
        let p = Path::new("/etc/vp2p/serve/vm1.conf");
        for line in [
            "x".repeat(20 << 20),
            format!("socket=/s,config={},clique=1", "c".repeat(20 << 20)),
            format!("socket={},config=/c,clique=1", "s".repeat(20 << 20)),
            format!("socket=/s,config=/c,clique={}", "9".repeat(20 << 20)),
            format!("socket=/s,config=/c,clique=1,{}=1", "k".repeat(20 << 20)),
        ] {
            let e = parse_spec_file(p, &line).unwrap_err();
            let msg = e.to_string();
            assert!(msg.len() < 400, "{} bytes: {}", msg.len(), &msg[..400]);
            assert!(msg.contains("..."), "{msg}");
            assert!(msg.contains("20971"), "the length is said: {msg}");
            // Said once: the error's source chain does not repeat it.
            assert!(std::error::Error::source(&e).is_none(), "{msg}");
        }
    }

    #[test]
    fn a_socket_given_twice_names_both_lines() {
        let p = Path::new("/etc/vp2p/serve/vm1.conf");
        let text = "socket=/run/a.sock,config=/c,clique=1\n# two\nsocket=/run/b.sock,config=/c,clique=2\nsocket=/run/a.sock,config=/d,clique=3\n";
        let specs = parse_spec_file(p, text).unwrap();
        let e = check_distinct_sockets(&specs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "socket /run/a.sock: given to two GPUs (/etc/vp2p/serve/vm1.conf:1 and /etc/vp2p/serve/vm1.conf:4)"
        );
        assert!(e.is_config());
    }

    #[test]
    fn a_conf_that_is_a_device_or_too_big_is_not_read() {
        let e = read_spec_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero: not a regular file (a character device)"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("vm1.conf");
        std::fs::write(&big, vec![b'#'; CONF_MAX as usize + 1]).unwrap();
        let e = read_spec_file(&big).unwrap_err();
        assert!(
            e.to_string().ends_with(": larger than 1048576 bytes"),
            "{e}"
        );
    }
}
