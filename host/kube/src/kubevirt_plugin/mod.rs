//! `p2p-host kubevirt plugin-hook`: vp2p as a KubeVirt plugin domain hook
//! (VEP 190, KubeVirt 1.9.0+), the successor of the `onDefineDomain` sidecar.
//!
//! virt-launcher calls `DomainHookService.MutateDomain` on a unix socket in
//! the pod's shared `/var/run/kubevirt-plugin/<plugin>/` directory with the
//! libvirt domain, the VMI and why it calls (boot, migration source or
//! target), and defines the domain it gets back. What the domain becomes is
//! the caller's [`DomainPatcher`] (the command line's: the same code as
//! `on-define-domain`); this module is the protocol, the socket and the
//! answers to each invocation context. Like `device_plugin`, it starts the
//! one tokio runtime of its process in [`run`]; nothing else imports it.

pub mod api;
mod server;

pub use server::Hook;

use std::path::{Path, PathBuf};

/// The plugin's name: the `Plugin` object's `metadata.name`, which KubeVirt
/// requires in the socket's directory.
pub const PLUGIN_NAME: &str = "vp2p";
/// Where the hook listens by default (the `Plugin` object's
/// `spec.domainHooks[].sidecar.socketPath`).
pub const DEFAULT_SOCKET: &str = "/var/run/kubevirt-plugin/vp2p/hook.sock";
/// The response metadata key that carries why a domain passed unchanged
/// (virt-launcher ignores it; the reason is also logged).
pub const ERROR_METADATA: &str = "vp2p-error";

/// What the patcher made of a domain and a VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The domain to answer with (patched, or as given when there was nothing
    /// to do), and what to log about it.
    Domain {
        /// The domain XML.
        xml: String,
        /// Lines for the log (changes, notes); may be empty.
        report: String,
    },
    /// Patching failed and the VMI asks to keep it running without P2P: the
    /// domain passes unchanged, the reason is logged and sent as metadata.
    Kept {
        /// Why nothing was patched.
        reason: String,
    },
    /// Patching failed and the VMI asks (`vp2p.io/on-error: fail`) that it
    /// not be defined: the call fails with the reason.
    Refused {
        /// Why.
        reason: String,
    },
}

/// Turns virt-launcher's domain and VMI JSON into an [`Outcome`]. Called off
/// the runtime's thread (it reads sysfs).
pub trait DomainPatcher: Send + Sync + 'static {
    /// The outcome for `domain` (libvirt XML) of the VM `vmi` (JSON).
    fn patch(&self, domain: &str, vmi: &str) -> Outcome;
}

impl<F> DomainPatcher for F
where
    F: Fn(&str, &str) -> Outcome + Send + Sync + 'static,
{
    fn patch(&self, domain: &str, vmi: &str) -> Outcome {
        self(domain, vmi)
    }
}

/// What `p2p-host kubevirt plugin-hook` was asked for.
#[derive(Debug, Clone)]
pub struct Config<P> {
    /// The socket to listen on; its directory is made if missing.
    pub socket: PathBuf,
    /// What a boot-time call's domain becomes.
    pub patcher: P,
    /// Where the hook's messages go: the library prints nothing itself.
    pub log: fn(&str),
}

/// Why the hook stopped.
#[derive(Debug, thiserror::Error)]
pub enum KubevirtPluginError {
    /// The socket could not be made.
    #[error("listening on {}: {source}", path.display())]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Something that is not a socket is where the socket goes (left alone).
    #[error("{} exists and is not a socket: not replacing it", .0.display())]
    NotASocket(PathBuf),
    /// The gRPC server failed.
    #[error("serving: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The runtime or a signal handler could not be set up.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Serves MutateDomain on `config.socket` until SIGTERM or SIGINT, then
/// removes the socket.
pub fn run<P: DomainPatcher>(config: Config<P>) -> Result<(), KubevirtPluginError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(server::serve(config))
}

/// The DomainHookService [`run`] serves, without a socket: what the fuzz
/// targets hand decoded requests to.
pub fn service<P: DomainPatcher>(patcher: P, log: fn(&str)) -> Hook<P> {
    server::Hook {
        patcher: std::sync::Arc::new(patcher),
        log,
    }
}

/// Makes the socket's directory and removes a socket an earlier run left
/// (which would refuse the bind); anything else at the path is an error.
fn prepare_socket(path: &Path) -> Result<(), KubevirtPluginError> {
    let bind_err = |source| KubevirtPluginError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(bind_err)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            std::fs::remove_file(path).map_err(bind_err)
        }
        Ok(_) => Err(KubevirtPluginError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(bind_err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocation_contexts_are_kubevirts_names() {
        for c in ["Boot", "MigrationSource", "MigrationTarget"] {
            assert_eq!(api::InvocationContext::parse(c).unwrap().as_str(), c);
        }
        assert_eq!(api::InvocationContext::parse("boot"), None);
        assert_eq!(api::InvocationContext::parse(""), None);
    }

    #[test]
    fn the_default_socket_is_where_kubevirt_looks() {
        let dir = format!("{}/{PLUGIN_NAME}/", api::PLUGIN_SOCKET_DIR);
        assert!(DEFAULT_SOCKET.starts_with(&dir) && DEFAULT_SOCKET.ends_with(".sock"));
    }

    #[test]
    fn a_stale_socket_goes_and_anything_else_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let sock = tmp.path().join("a/b/hook.sock");
        prepare_socket(&sock).unwrap();
        assert!(sock.parent().unwrap().is_dir());
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        drop(listener);
        prepare_socket(&sock).unwrap();
        assert!(!sock.exists());
        std::fs::write(&sock, "not a socket").unwrap();
        let e = prepare_socket(&sock).unwrap_err();
        assert!(matches!(e, KubevirtPluginError::NotASocket(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&sock).unwrap(), "not a socket");
    }
}
