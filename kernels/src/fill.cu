// Fills a buffer with the pattern every transfer is checked against.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

extern "C" __global__ void vp2p_fill(u8* dst, u64 bytes, u32 seed) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < bytes; i += stride) {
        dst[i] = pattern(seed, i);
    }
}
