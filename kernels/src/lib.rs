//! CUDA C sources for vp2p's benchmarks, compiled at run time with NVRTC for
//! the device's compute capability, so the binaries build without CUDA.
//!
//! - `copy_read` / `copy_write`: vectorised copies run by the SM, one GPU's
//!   kernel reading from or writing to a peer's memory;
//! - `spin`: holds a stream until the host releases it, so queued work starts
//!   together and launch cost stays out of the timed region;
//! - `pingpong`: two kernels on two GPUs bounce a flag for one-way latency;
//! - `fill` / `verify`: the pattern every transfer is checked against.

/// Entry points, as named in [`SOURCE`].
pub mod entry {
    pub const COPY: &str = "vp2p_copy";
    pub const SPIN: &str = "vp2p_spin";
    pub const PINGPONG: &str = "vp2p_pingpong";
    pub const FILL: &str = "vp2p_fill";
    pub const VERIFY: &str = "vp2p_verify";
    pub const REDUCE_CHECK: &str = "vp2p_reduce_check";

    /// Every entry point, for loading the module.
    pub const ALL: [&str; 6] = [COPY, SPIN, PINGPONG, FILL, VERIFY, REDUCE_CHECK];
}

/// Threads per block the host launches the copy, fill and verify kernels with.
pub const BLOCK_THREADS: u32 = 512;

/// The byte the pattern puts at `index` for `seed`. The host computes the same
/// values as the `pattern` device function, so either side can check the other.
pub fn pattern_byte(seed: u32, index: u64) -> u8 {
    let x = (index as u32)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(seed)
        .wrapping_add((index >> 32) as u32);
    (x ^ (x >> 13) ^ (x >> 24)) as u8
}

/// The CUDA C source of all kernels (one NVRTC program).
pub const SOURCE: &str = r#"
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u8 pattern(u32 seed, u64 i) {
    u32 x = (u32)i * 2654435761u + seed + (u32)(i >> 32);
    return (u8)(x ^ (x >> 13) ^ (x >> 24));
}

// Timeouts count SM cycles with signed arithmetic: %globaltimer can step
// backwards in a VM, and an unsigned difference would then wrap and fire at once.
__device__ __forceinline__ bool expired(long long start, long long cycles) {
    return clock64() - start > cycles;
}

// Copies `bytes` from src to dst, 16 bytes per thread per step when both are
// 16-byte aligned (cudaMalloc gives 256-byte alignment), bytewise for the
// tail. Either pointer may be a peer's memory: launched on the reading GPU it
// is a peer read, on the writing GPU a peer write.
extern "C" __global__ void vp2p_copy(const u8* __restrict__ src, u8* __restrict__ dst, u64 bytes) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 vecs = bytes / 16;
    const uint4* s4 = (const uint4*)src;
    uint4* d4 = (uint4*)dst;
    u64 i = tid;
    // Four independent 16-byte loads in flight per thread hide peer latency.
    for (; i + 3 * stride < vecs; i += 4 * stride) {
        uint4 a = s4[i];
        uint4 b = s4[i + stride];
        uint4 c = s4[i + 2 * stride];
        uint4 d = s4[i + 3 * stride];
        d4[i] = a;
        d4[i + stride] = b;
        d4[i + 2 * stride] = c;
        d4[i + 3 * stride] = d;
    }
    for (; i < vecs; i += stride) {
        d4[i] = s4[i];
    }
    for (u64 j = vecs * 16 + tid; j < bytes; j += stride) {
        dst[j] = src[j];
    }
}

// Spins until *release becomes non-zero (the host writes it through mapped
// pinned memory) or `timeout_cycles` pass; *timed_out records which.
// *waited gets the cycles spent, for diagnosing a hold that did not work.
extern "C" __global__ void vp2p_spin(volatile u32* release, long long timeout_cycles, u32* timed_out,
                                     long long* waited) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const long long start = clock64();
    while (*release == 0) {
        if (expired(start, timeout_cycles)) {
            *timed_out = 1;
            break;
        }
    }
    *waited = clock64() - start;
}

// One thread per GPU bounces a counter: the initiator writes i into the
// peer's flag and waits for i in its own; the responder waits, then answers.
// Flags live in each GPU's own memory and are written by the peer, so every
// step is one peer write seen by a local poll. The host times the kernels
// with events; result[0] = cycles spent, result[1] = rounds completed.
extern "C" __global__ void vp2p_pingpong(volatile u32* mine, volatile u32* peers, u32 rounds,
                                         int initiator, long long timeout_cycles, u64* result) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const long long start = clock64();
    u32 done = 0;
    for (u32 i = 1; i <= rounds; ++i) {
        if (initiator) {
            *peers = i;
            __threadfence_system();
        }
        while (*mine != i) {
            if (expired(start, timeout_cycles)) {
                result[0] = clock64() - start;
                result[1] = done;
                return;
            }
        }
        if (!initiator) {
            *peers = i;
            __threadfence_system();
        }
        done = i;
    }
    result[0] = clock64() - start;
    result[1] = done;
}

extern "C" __global__ void vp2p_fill(u8* dst, u64 bytes, u32 seed) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) {
        dst[i] = pattern(seed, i);
    }
}

// Counts bytes that differ from the pattern; also records the first bad index.
extern "C" __global__ void vp2p_verify(const u8* data, u64 bytes, u32 seed, u64* mismatches, u64* first_bad) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 bad = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) {
        if (data[i] != pattern(seed, i)) {
            if (bad == 0) atomicMin(first_bad, i);
            ++bad;
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

// Checks an all-reduce (sum) of float buffers where rank r held r + 1 + (i % 7):
// every element must equal sum_r (r + 1) + ranks * (i % 7).
extern "C" __global__ void vp2p_reduce_check(const float* data, u64 count, u32 ranks, u64* mismatches) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const float base = 0.5f * ranks * (ranks + 1);
    u64 bad = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const float want = base + (float)ranks * (float)(i % 7);
        if (data[i] != want) ++bad;
    }
    if (bad) atomicAdd(mismatches, bad);
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_point_is_in_the_source() {
        for name in entry::ALL {
            assert!(
                SOURCE.contains(&format!("__global__ void {name}(")),
                "{name} missing"
            );
        }
    }

    #[test]
    fn pattern_is_not_constant_and_differs_by_seed() {
        let a: Vec<u8> = (0..4096).map(|i| pattern_byte(1, i)).collect();
        let b: Vec<u8> = (0..4096).map(|i| pattern_byte(2, i)).collect();
        assert_ne!(a, b);
        let distinct: std::collections::BTreeSet<u8> = a.iter().copied().collect();
        assert!(distinct.len() > 200, "pattern covers most byte values");
        // No byte equals the 0xA5 poison at every position.
        assert!(a.iter().any(|&x| x != 0xa5));
    }
}
