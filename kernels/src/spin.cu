// The spin kernel that holds a stream until the host releases it.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

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
