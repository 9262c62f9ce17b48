//! vp2p's OCI images as `scripts/image.sh` builds them (from the suite's own
//! p2p-host): each archive is an OCI image layout (image-spec v1.1:
//! `oci-layout` with imageLayoutVersion 1.0.0, an `index.json` naming one
//! image manifest, every blob stored under the SHA-256 of its bytes and
//! described with that digest and its size) whose index carries the name
//! containerd imports it as; the config says the entry point and user each
//! manifest runs with; and the root the layer unpacks to runs what it
//! holds: `p2p-host --version` with only the libraries packed beside it
//! (chroot), and in the hook image the onDefineDomain wrapper through its
//! shell.

use std::path::{Path, PathBuf};
use std::process::Command;

use p2p_tests::{binary, repo_root};
use serde_json::Value;

/// The SHA-256 of a file, as `sha256sum` prints it.
fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Reads blob `digest` of `layout`, checking it against `size` and its name.
fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().expect("a digest");
    let hex = digest.strip_prefix("sha256:").expect("a SHA-256 digest");
    let path = layout.join("blobs/sha256").join(hex);
    let len = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len();
    assert_eq!(Some(len), descriptor["size"].as_u64(), "{digest}: size");
    assert_eq!(sha256(&path), hex, "{digest}: the bytes' digest");
    path
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Unpacks `tar` and checks it as an OCI layout of one image named `name`:
/// the image's config and the root its layers unpack to.
fn check_archive(tar: &Path, name: &str, dir: &Path) -> (Value, PathBuf) {
    let layout = dir.join(format!("{name}.layout"));
    std::fs::create_dir_all(&layout).unwrap();
    let st = Command::new("tar")
        .arg("xf")
        .arg(tar)
        .arg("-C")
        .arg(&layout)
        .status()
        .unwrap();
    assert!(st.success(), "tar xf {}", tar.display());
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    assert_eq!(index["schemaVersion"], 2);
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1, "{index:#}");
    let m = &manifests[0];
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        m["annotations"]["io.containerd.image.name"],
        format!("localhost/vp2p/{name}:{version}")
    );
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        version
    );
    let manifest = json(&blob(&layout, m));
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = json(&blob(&layout, &manifest["config"]));
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let root = dir.join(format!("{name}.root"));
    std::fs::create_dir_all(&root).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(
        config["rootfs"]["diff_ids"].as_array().unwrap().len(),
        layers.len()
    );
    for layer in layers {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
        let st = Command::new("tar")
            .arg("xzf")
            .arg(blob(&layout, layer))
            .arg("-C")
            .arg(&root)
            .status()
            .unwrap();
        assert!(st.success());
    }
    (config["config"].clone(), root)
}

#[test]
fn images_are_oci_layouts_whose_roots_run_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/image.sh"))
        .arg("--binary")
        .arg(binary("p2p-host"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .expect("bash runs scripts/image.sh");
    assert!(
        out.status.success(),
        "scripts/image.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        printed,
        [
            dir.path().join(format!("p2p-host-{version}.oci.tar")),
            dir.path().join(format!("kubevirt-hook-{version}.oci.tar")),
        ]
    );

    let (config, root) = check_archive(&printed[0], "p2p-host", dir.path());
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/bin/p2p-host"])
    );
    assert_eq!(config["User"], "0");
    let run = Command::new("/usr/sbin/chroot")
        .arg(&root)
        .args(["/usr/bin/p2p-host", "--version"])
        .env_clear()
        .output()
        .expect("chroot runs");
    assert!(
        run.status.success(),
        "p2p-host in the image's root: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).starts_with("p2p-host "));

    let (config, root) = check_archive(&printed[1], "kubevirt-hook", dir.path());
    assert_eq!(config["Entrypoint"], serde_json::json!(["/sidecar-shim"]));
    assert_eq!(config["User"], "107");
    assert!(root.join("sidecar-shim").is_file());
    let run = Command::new("/usr/sbin/chroot")
        .arg(&root)
        .args(["/usr/bin/onDefineDomain", "--help"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("chroot runs");
    assert!(
        run.status.success(),
        "onDefineDomain in the hook image's root: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("on-define-domain"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}
