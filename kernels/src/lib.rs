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

    /// The kernels the CUDA sources define, read from the `.cu` text alone:
    /// every `__global__ void NAME(` and every `VP2P_COPY(NAME, ...)` line
    /// (the macro in copy.cu that expands to such a definition). A `#define`
    /// and its `\`-continued lines are skipped: there `name` is the macro's
    /// parameter, not a kernel.
    fn kernels_in_source() -> Vec<String> {
        let mut names = Vec::new();
        let mut in_define = false;
        for line in SOURCE.lines() {
            let line = line.trim();
            if in_define || line.starts_with("#define") {
                in_define = line.ends_with('\\');
                continue;
            }
            let name = if let Some(rest) = line.strip_prefix("VP2P_COPY(") {
                rest.split(',').next()
            } else {
                line.split_once("__global__ void ")
                    .and_then(|(_, rest)| rest.split('(').next())
            };
            if let Some(n) = name {
                names.push(n.trim().to_string());
            }
        }
        names
    }

    #[test]
    fn every_entry_point_is_defined_once_in_the_source() {
        // Both ways, against the .cu text: every kernel the sources define is
        // an entry point the module loads, each defined exactly once, and no
        // entry point names a kernel the sources lack.
        let mut defined = kernels_in_source();
        defined.sort();
        let mut listed: Vec<String> = entries().map(str::to_string).collect();
        listed.sort();
        assert_eq!(defined, listed, "kernels in the .cu sources vs entries()");
        // The count, read off the sources by hand: seven VP2P_COPY lines and
        // vp2p_copy_tma in copy.cu, one __global__ in each of spin, pingpong,
        // fill, verify and reduce_check.
        assert_eq!(defined.len(), 13);
        let mut unique = defined.clone();
        unique.dedup();
        assert_eq!(unique, defined, "a kernel is defined twice");
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
