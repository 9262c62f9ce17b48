// SM copy kernels: one GPU's kernel reading from or writing to a peer's memory.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

// Copy kernels, run by the SM. Either pointer may be a peer's memory:
// launched on the reading GPU it is a peer read, on the writing GPU a peer
// write. Both pointers are 16-byte aligned (cuMemAlloc gives 256), so the
// body moves uint4 vectors and the tail moves bytes. Variants differ in how
// many vectors each thread has in flight (U) and in how work is spread:
// grid-stride (each warp touches 512 B, the grid a wide window) or block
// chunks (each block streams a contiguous U * blockDim * 16 bytes at a time);
// "cs" variants use streaming (evict-first) loads and stores.

template <int U>
__device__ __forceinline__ void copy_grid_stride(const uint4* __restrict__ s4, uint4* __restrict__ d4, u64 vecs) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < vecs; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k) v[k] = s4[i + k * stride];
#pragma unroll
        for (int k = 0; k < U; ++k) d4[i + k * stride] = v[k];
    }
    for (; i < vecs; i += stride) d4[i] = s4[i];
}

template <int U>
__device__ __forceinline__ void copy_grid_stride_cs(const uint4* __restrict__ s4, uint4* __restrict__ d4, u64 vecs) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (U - 1) * stride < vecs; i += U * stride) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k) v[k] = __ldcs(s4 + i + k * stride);
#pragma unroll
        for (int k = 0; k < U; ++k) __stcs(d4 + i + k * stride, v[k]);
    }
    for (; i < vecs; i += stride) __stcs(d4 + i, __ldcs(s4 + i));
}

// Like copy_grid_stride<4>, without __restrict__: coherent ld.global
// instead of the read-only (non-coherent) path the compiler picks otherwise.
__device__ __forceinline__ void copy_grid_stride_plain4(const uint4* s4, uint4* d4, u64 vecs) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < vecs; i += 4 * stride) {
        uint4 v0 = s4[i], v1 = s4[i + stride], v2 = s4[i + 2 * stride], v3 = s4[i + 3 * stride];
        d4[i] = v0;
        d4[i + stride] = v1;
        d4[i + 2 * stride] = v2;
        d4[i + 3 * stride] = v3;
    }
    for (; i < vecs; i += stride) d4[i] = s4[i];
}

template <int U>
__device__ __forceinline__ void copy_block_chunks(const uint4* __restrict__ s4, uint4* __restrict__ d4, u64 vecs) {
    const u64 chunk = (u64)blockDim.x * U;
    for (u64 base = (u64)blockIdx.x * chunk; base < vecs; base += (u64)gridDim.x * chunk) {
        uint4 v[U];
#pragma unroll
        for (int k = 0; k < U; ++k) {
            const u64 i = base + (u64)k * blockDim.x + threadIdx.x;
            if (i < vecs) v[k] = s4[i];
        }
#pragma unroll
        for (int k = 0; k < U; ++k) {
            const u64 i = base + (u64)k * blockDim.x + threadIdx.x;
            if (i < vecs) d4[i] = v[k];
        }
    }
}

__device__ __forceinline__ void copy_tail(const u8* __restrict__ src, u8* __restrict__ dst, u64 bytes) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 j = (bytes / 16) * 16 + tid; j < bytes; j += stride) dst[j] = src[j];
}

#define VP2P_COPY(name, body)                                                                 \
    extern "C" __global__ void name(const u8* __restrict__ src, u8* __restrict__ dst, u64 bytes) { \
        body((const uint4*)src, (uint4*)dst, bytes / 16);                                     \
        copy_tail(src, dst, bytes);                                                           \
    }

VP2P_COPY(vp2p_copy, copy_grid_stride<4>)
VP2P_COPY(vp2p_copy_u2, copy_grid_stride<2>)
VP2P_COPY(vp2p_copy_u8, copy_grid_stride<8>)
VP2P_COPY(vp2p_copy_cs4, copy_grid_stride_cs<4>)
VP2P_COPY(vp2p_copy_chunk4, copy_block_chunks<4>)
VP2P_COPY(vp2p_copy_chunk8, copy_block_chunks<8>)
VP2P_COPY(vp2p_copy_plain4, copy_grid_stride_plain4)

// Bulk copies through the Tensor Memory Accelerator (sm_90+): one thread per
// block moves TMA_CHUNK-byte pieces global -> shared (completing on an
// mbarrier) -> global, double-buffered, so the fabric sees large requests as
// from a copy engine. The other threads copy the tail that is not a whole
// chunk. Below sm_90 it is the vector copy.
#define TMA_CHUNK 16384u

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

extern "C" __global__ void vp2p_copy_tma(const u8* __restrict__ src, u8* __restrict__ dst, u64 bytes) {
#if __CUDA_ARCH__ >= 900
    __shared__ __align__(128) u8 stage[2][TMA_CHUNK];
    __shared__ __align__(8) u64 bar[2];
    const u64 chunks = bytes / TMA_CHUNK;
    // Tail: every thread of every block, 16 bytes at a time then bytes.
    {
        const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
        const u64 stride = (u64)gridDim.x * blockDim.x;
        const u64 from = chunks * TMA_CHUNK;
        const u64 vec_end = from + ((bytes - from) / 16) * 16;
        for (u64 j = from + tid * 16; j < vec_end; j += stride * 16) {
            *(uint4*)(dst + j) = *(const uint4*)(src + j);
        }
        for (u64 j = vec_end + tid; j < bytes; j += stride) dst[j] = src[j];
    }
    if (threadIdx.x != 0) return;
    for (int b = 0; b < 2; ++b) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bar[b])));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    u32 phase[2] = {0, 0};
    u32 k = 0;
    for (u64 c = blockIdx.x; c < chunks; c += gridDim.x, ++k) {
        const int b = k & 1;
        // The store that last read this buffer must be done reading it.
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        u64 state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                     : "=l"(state) : "r"(smem_addr(&bar[b])), "r"(TMA_CHUNK) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_addr(stage[b])), "l"(src + c * TMA_CHUNK), "r"(TMA_CHUNK), "r"(smem_addr(&bar[b]))
                     : "memory");
        u32 done = 0;
        while (!done) {
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(smem_addr(&bar[b])), "r"(phase[b]) : "memory");
        }
        phase[b] ^= 1;
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(dst + c * TMA_CHUNK), "r"(smem_addr(stage[b])), "r"(TMA_CHUNK) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
    copy_grid_stride<4>((const uint4*)src, (uint4*)dst, bytes / 16);
    copy_tail(src, dst, bytes);
#endif
}
