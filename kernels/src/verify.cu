// Counts the bytes that differ from the pattern.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

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
