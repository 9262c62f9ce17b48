//! `realpath(3)` for many paths that share most of their components.
//!
//! `std::fs::canonicalize` (glibc's realpath) asks the kernel about every
//! component of every path: for the `bus/pci/devices` links of a big host,
//! whose targets are ten or more components deep, that was a dozen `readlink`
//! calls per function. The functions of a tree share all but their last
//! components, so this resolver remembers each directory it has resolved and
//! asks only about the ones it has not seen: about two calls per function. The
//! answer is the same as realpath's, symlinks in the middle of a path included;
//! the tree is assumed not to change during one scan.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed for one path before giving up, as Linux does (ELOOP).
const MAX_LINKS: u32 = 40;

#[derive(Debug, Default)]
pub(super) struct Resolver {
    /// A path whose parent is already resolved -> its real path.
    known: HashMap<PathBuf, PathBuf>,
}

impl Resolver {
    /// The real path of `path` (absolute, or relative to the working directory):
    /// every symlink followed, `.` and `..` applied. Fails as realpath does when a
    /// component is missing, not a directory, or links loop.
    pub(super) fn canonicalize(&mut self, path: &Path) -> io::Result<PathBuf> {
        let start = if path.is_absolute() {
            PathBuf::from("/")
        } else {
            std::env::current_dir()?
        };
        let mut links = 0;
        self.walk(start, path, &mut links)
    }

    /// Applies the components of `path` to the real directory `cur`.
    fn walk(&mut self, mut cur: PathBuf, path: &Path, links: &mut u32) -> io::Result<PathBuf> {
        for c in path.components() {
            match c {
                Component::RootDir => cur = PathBuf::from("/"),
                Component::Prefix(_) | Component::CurDir => {}
                Component::ParentDir => {
                    cur.pop();
                }
                Component::Normal(name) => {
                    let candidate = cur.join(name);
                    if let Some(real) = self.known.get(&candidate) {
                        cur = real.clone();
                        continue;
                    }
                    let real = match fs::read_link(&candidate) {
                        Ok(target) => {
                            *links += 1;
                            if *links > MAX_LINKS {
                                return Err(io::Error::from_raw_os_error(40)); // ELOOP
                            }
                            self.walk(cur.clone(), &target, links)?
                        }
                        // EINVAL: it exists and is not a symlink.
                        Err(e) if e.raw_os_error() == Some(22) => candidate.clone(),
                        Err(e) => return Err(e),
                    };
                    self.known.insert(candidate, real.clone());
                    cur = real;
                }
            }
        }
        Ok(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vp2p-resolve-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::canonicalize(d).unwrap()
    }

    /// Agrees with std's canonicalize on links that go up, down, through other
    /// links and to absolute targets, and fails where it fails.
    #[test]
    fn agrees_with_realpath() {
        let d = scratch("agree");
        fs::create_dir_all(d.join("devices/pci0000:00/0000:00:01.0/0000:01:00.0")).unwrap();
        fs::create_dir_all(d.join("bus/pci/devices")).unwrap();
        fs::create_dir_all(d.join("elsewhere/real")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
            d.join("bus/pci/devices/0000:01:00.0"),
        )
        .unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            d.join("bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        // A directory in the middle of a path that is itself a link.
        symlink("elsewhere/real", d.join("hop")).unwrap();
        fs::create_dir_all(d.join("elsewhere/real/x")).unwrap();
        symlink(d.join("hop/x"), d.join("bus/pci/devices/abs")).unwrap();
        symlink("missing/dir", d.join("bus/pci/devices/dangling")).unwrap();
        symlink("loop", d.join("bus/pci/devices/loop")).unwrap();
        fs::write(d.join("file"), "").unwrap();
        symlink("../../../file/below", d.join("bus/pci/devices/notdir")).unwrap();

        let mut r = Resolver::default();
        for name in ["0000:01:00.0", "0000:00:01.0", "abs", "0000:01:00.0"] {
            let p = d.join("bus/pci/devices").join(name);
            assert_eq!(
                r.canonicalize(&p).unwrap(),
                fs::canonicalize(&p).unwrap(),
                "{name}"
            );
        }
        let p = d.join("hop/x/../x/./");
        assert_eq!(r.canonicalize(&p).unwrap(), fs::canonicalize(&p).unwrap());
        for name in ["dangling", "loop", "notdir"] {
            let p = d.join("bus/pci/devices").join(name);
            assert!(fs::canonicalize(&p).is_err(), "{name}");
            assert!(r.canonicalize(&p).is_err(), "{name}");
        }
        fs::remove_dir_all(&d).unwrap();
    }
}
