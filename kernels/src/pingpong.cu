// The ping-pong kernel pair for one-way latency.
// Part of vp2p's one NVRTC program (p2p_kernels::SOURCE): common.cu comes first.

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
