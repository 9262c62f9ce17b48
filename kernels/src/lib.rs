//! CUDA C sources for vp2p's benchmarks, compiled at run time with NVRTC for
//! the device's compute capability, so the binaries build without CUDA.
//!
//! One module per kernel, holding its source (`*.cu` beside it), its entry
//! point and, with the `launch` feature, its typed launch: an `unsafe fn`
//! whose `# Safety` section says what the device pointers must be.
//!
//! - [`copy`]: vectorised copies run by the SM, one GPU's kernel reading
//!   from or writing to a peer's memory;
//! - [`spin`]: holds a stream until the host releases it, so queued work
//!   starts together and launch cost stays out of the timed region;
//! - [`pingpong`]: two kernels on two GPUs bounce a flag for one-way latency;
//! - [`fill`] / [`verify`]: the pattern every transfer is checked against;
//! - [`reduce_check`]: checks an NCCL all-reduce's sums.

#![warn(missing_docs)]

pub mod copy;
pub mod fill;
pub mod pingpong;
pub mod reduce_check;
pub mod spin;
pub mod verify;

/// Threads per block the host launches the fill, verify and reduce-check
/// kernels with.
pub const BLOCK_THREADS: u32 = 512;

/// The CUDA C source of all kernels: one NVRTC program, helpers first.
pub const SOURCE: &str = concat!(
    include_str!("common.cu"),
    "\n",
    include_str!("copy.cu"),
    "\n",
    include_str!("spin.cu"),
    "\n",
    include_str!("pingpong.cu"),
    "\n",
    include_str!("fill.cu"),
    "\n",
    include_str!("verify.cu"),
    "\n",
    include_str!("reduce_check.cu"),
);

/// Every entry point of [`SOURCE`], for loading the module.
pub fn entries() -> impl Iterator<Item = &'static str> {
    copy::VARIANTS.into_iter().chain([
        spin::ENTRY,
        pingpong::ENTRY,
        fill::ENTRY,
        verify::ENTRY,
        reduce_check::ENTRY,
    ])
}

/// A one-dimensional launch shape.
#[cfg(feature = "launch")]
fn shape(grid: u32, block: u32) -> cudarc::driver::LaunchConfig {
    cudarc::driver::LaunchConfig {
        grid_dim: (grid.max(1), 1, 1),
        block_dim: (block.max(1), 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_defined_once_in_the_source() {
        for name in entries() {
            let direct = SOURCE.matches(&format!("__global__ void {name}(")).count();
            let by_macro = SOURCE.matches(&format!("VP2P_COPY({name}, ")).count();
            assert_eq!(direct + by_macro, 1, "{name}");
        }
        assert_eq!(entries().count(), copy::VARIANTS.len() + 5);
    }

    #[test]
    fn each_module_carries_its_own_kernels() {
        assert!(fill::SOURCE.contains("__global__ void vp2p_fill("));
        assert!(verify::SOURCE.contains("__global__ void vp2p_verify("));
        assert!(spin::SOURCE.contains("__global__ void vp2p_spin("));
        assert!(pingpong::SOURCE.contains("__global__ void vp2p_pingpong("));
        assert!(reduce_check::SOURCE.contains("__global__ void vp2p_reduce_check("));
        assert!(copy::SOURCE.contains("VP2P_COPY(vp2p_copy_cs4, "));
    }
}
