// Checks an NCCL all-reduce's result.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

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
