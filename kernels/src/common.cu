// Types and helpers every kernel of vp2p's NVRTC program uses.

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
