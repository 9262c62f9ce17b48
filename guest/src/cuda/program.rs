//! The kernels of `p2p-kernels`, compiled with NVRTC for each GPU's compute
//! capability and loaded into its context.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use p2p_kernels as k;

use super::kernels::Kernels;
use super::{CudaError, Gpu};

/// Compiles once per compute capability and loads into every GPU.
pub fn load_all(gpus: &[Gpu]) -> Result<Vec<Kernels>, CudaError> {
    if !super::nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let mut ptx_by_cc = BTreeMap::new();
    let mut out = Vec::new();
    for gpu in gpus {
        let (major, minor) = gpu.compute_capability;
        let ptx = match ptx_by_cc.get(&(major, minor)) {
            Some(p) => Clone::clone(p),
            None => {
                let opts = CompileOptions {
                    options: vec![
                        format!("--gpu-architecture=compute_{major}{minor}"),
                        "-std=c++17".into(),
                    ],
                    name: Some("vp2p_kernels.cu".into()),
                    ..Default::default()
                };
                let ptx =
                    compile_ptx_with_opts(k::SOURCE, opts).map_err(|e| CudaError::Compile {
                        major,
                        minor,
                        log: e.to_string(),
                    })?;
                ptx_by_cc.insert((major, minor), ptx.clone());
                ptx
            }
        };
        let call = |call, source| CudaError::Call {
            call,
            ordinal: gpu.ordinal,
            source,
        };
        let module = gpu
            .ctx
            .load_module(ptx)
            .map_err(|e| call("cuModuleLoadData", e))?;
        let f = |name| {
            module
                .load_function(name)
                .map_err(|e| call("cuModuleGetFunction", e))
        };
        out.push(Kernels {
            ordinal: gpu.ordinal,
            spin: f(k::spin::ENTRY)?,
            pingpong: f(k::pingpong::ENTRY)?,
            fill: f(k::fill::ENTRY)?,
            verify: f(k::verify::ENTRY)?,
            reduce_check: f(k::reduce_check::ENTRY)?,
            copy_variants: k::copy::VARIANTS
                .iter()
                .map(|n| f(n))
                .collect::<Result<_, _>>()?,
            _module: Arc::clone(&module),
        });
    }
    Ok(out)
}
