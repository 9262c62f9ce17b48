//! Child processes that end with their test, pass or fail.
//!
//! [`spawn`] starts a command in a process group of its own and returns a
//! [`Spawned`] guard: dropping it (the test returned, or panicked and
//! unwound) ends the whole group, SIGTERM first and SIGKILL after a grace, so
//! what the child started ends too. A guard kept for the whole test binary
//! (in a static, which Rust never drops) is ended when the binary exits, by
//! a hook registered with `atexit(3)`. A test binary killed outright runs
//! no hook; `scripts/test.sh` looks for anything left after the suite.

use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// How long a group is given to end after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(3);

/// The process groups started and not yet ended, by group id.
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

extern "C" fn end_all_at_exit() {
    let groups = match LIVE.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for g in groups {
        // SAFETY: kill(2) with a negative pid signals the process group the
        // suite created for one of its children; no memory is involved.
        unsafe {
            libc::kill(-g, libc::SIGKILL);
        }
    }
}

/// A child process (the leader of a process group of its own) that is ended,
/// with its group, when the guard is dropped.
#[derive(Debug)]
pub struct Spawned {
    child: Option<Child>,
    group: i32,
    what: String,
}

/// Starts `cmd` in a new process group; `what` names it in messages.
pub fn spawn(cmd: &mut Command) -> io::Result<Spawned> {
    HOOK.call_once(|| {
        // SAFETY: registers a plain function without arguments to run at
        // exit(3); it only reads a static and sends signals.
        unsafe {
            libc::atexit(end_all_at_exit);
        }
    });
    let child = cmd.process_group(0).spawn()?;
    let group = i32::try_from(child.id()).unwrap_or(i32::MAX);
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(group);
    Ok(Spawned {
        what: format!("{:?}", cmd.get_program()),
        child: Some(child),
        group,
    })
}

/// [`spawn`] as a method of [`Command`], where the command is built.
pub trait SpawnOwned {
    /// Starts the command in a new process group; the group ends with the
    /// returned guard.
    fn spawn_owned(&mut self) -> io::Result<Spawned>;
}

impl SpawnOwned for Command {
    fn spawn_owned(&mut self) -> io::Result<Spawned> {
        spawn(self)
    }
}

impl Spawned {
    /// Waits for the child and collects what it wrote to piped stdout and
    /// stderr (as [`Child::wait_with_output`]); the rest of its group is
    /// ended when the guard goes.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        let child = self.child.take().expect("the child is held until then");
        child.wait_with_output()
    }

    /// Ends the group now: SIGTERM, then SIGKILL after [`GRACE`]; the
    /// child's status once it ended.
    pub fn end(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut().and_then(|c| match c.try_wait() {
            Ok(Some(s)) => Some(s),
            _ => {
                signal(self.group, libc::SIGTERM);
                let start = Instant::now();
                loop {
                    if let Ok(Some(s)) = c.try_wait() {
                        break Some(s);
                    }
                    if start.elapsed() > GRACE {
                        signal(self.group, libc::SIGKILL);
                        break c.wait().ok();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        // Whatever else the child started in its group.
        signal(self.group, libc::SIGKILL);
        LIVE.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|g| *g != self.group);
        status
    }

    /// What was started, for messages.
    pub fn what(&self) -> &str {
        &self.what
    }
}

fn signal(group: i32, sig: i32) {
    // SAFETY: kill(2) on the process group this guard created; an ended
    // group gives ESRCH, which is ignored.
    unsafe {
        libc::kill(-group, sig);
    }
}

impl Deref for Spawned {
    type Target = Child;

    fn deref(&self) -> &Child {
        self.child
            .as_ref()
            .expect("the child is held until the guard goes")
    }
}

impl DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .expect("the child is held until the guard goes")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn dropping_the_guard_ends_the_child_and_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 300 & echo $! > {}; wait", pidfile.display()));
        let child = spawn(&mut cmd).unwrap();
        let leader = child.id() as i32;
        let start = Instant::now();
        while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "sh never started sleep"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let grandchild: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(alive(leader) && alive(grandchild));
        drop(child);
        // The leader is reaped by the guard; the grandchild, re-parented,
        // is reaped by init, so it is gone once signalled and collected.
        let start = Instant::now();
        while alive(grandchild) {
            let stat =
                std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
            if stat.contains(") Z ") {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the grandchild outlived the guard"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!LIVE.lock().unwrap().contains(&leader));
    }
}
