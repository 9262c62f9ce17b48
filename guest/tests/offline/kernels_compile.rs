//! The CUDA kernels compile with the real NVRTC for the GPUs vp2p targets.
//! NVRTC needs no GPU: scripts/setup.sh installs NVIDIA's NVRTC wheel and
//! scripts/test.sh puts it on LD_LIBRARY_PATH. Without it this test fails,
//! saying so.

use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

#[test]
fn kernels_compile_with_nvrtc_for_hopper_and_ampere() {
    assert!(
        p2p_guest::cuda::nvrtc_present(),
        "libnvrtc.so.13 not found: run `bash scripts/setup.sh` and put its NVRTC directory on \
         LD_LIBRARY_PATH (scripts/test.sh does both)"
    );
    for arch in ["compute_90", "compute_80"] {
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()],
            name: Some("vp2p_kernels.cu".into()),
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(p2p_kernels::SOURCE, opts)
            .unwrap_or_else(|e| panic!("NVRTC rejects the kernels for {arch}: {e}"));
        let text = ptx.to_src();
        for entry in p2p_kernels::entries() {
            assert!(
                text.contains(&format!(".entry {entry}(")),
                "{entry} missing from the {arch} PTX"
            );
        }
        // The typed launches in p2p-kernels pass exactly these argument
        // widths, in this order (u64 pointers and sizes, u32 seeds, ranks,
        // rounds and flags, i64 timeouts): NVRTC's parameter list must agree.
        let launches: [(&str, &[&str]); 6] = [
            (p2p_kernels::fill::ENTRY, &["u64", "u64", "u32"]),
            (
                p2p_kernels::verify::ENTRY,
                &["u64", "u64", "u32", "u64", "u64"],
            ),
            (p2p_kernels::spin::ENTRY, &["u64", "u64", "u64", "u64"]),
            (
                p2p_kernels::pingpong::ENTRY,
                &["u64", "u64", "u32", "u32", "u64", "u64"],
            ),
            (
                p2p_kernels::reduce_check::ENTRY,
                &["u64", "u64", "u32", "u64"],
            ),
            (
                p2p_kernels::copy::VARIANTS[p2p_kernels::copy::DEFAULT],
                &["u64", "u64", "u64"],
            ),
        ];
        for (entry, want) in launches {
            assert_eq!(params(&text, entry), want, "{entry} on {arch}");
        }
        for v in p2p_kernels::copy::VARIANTS {
            assert_eq!(params(&text, v), ["u64", "u64", "u64"], "{v} on {arch}");
        }
        // The copy kernels move 16 bytes per access.
        let wide = text
            .lines()
            .any(|l| l.trim_start().starts_with("ld.global") && l.contains(".v4."));
        assert!(wide, "no 16-byte loads in the {arch} PTX");
    }
}

/// The `.param` types of `entry` in the PTX, in order.
fn params(ptx: &str, entry: &str) -> Vec<String> {
    let start = ptx
        .find(&format!(".entry {entry}("))
        .unwrap_or_else(|| panic!("{entry} not in the PTX"));
    let list = &ptx[start..start + ptx[start..].find(')').expect("parameter list ends")];
    list.lines()
        .filter_map(|l| l.trim().strip_prefix(".param ."))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}
