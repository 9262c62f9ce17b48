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
        for entry in p2p_kernels::entry::ALL
            .iter()
            .chain(p2p_kernels::entry::COPY_VARIANTS.iter())
        {
            assert!(
                text.contains(&format!(".entry {entry}(")),
                "{entry} missing from the {arch} PTX"
            );
        }
        // The copy kernels move 16 bytes per access.
        let wide = text
            .lines()
            .any(|l| l.trim_start().starts_with("ld.global") && l.contains(".v4."));
        assert!(wide, "no 16-byte loads in the {arch} PTX");
    }
}
