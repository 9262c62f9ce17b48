//! p2p-guest's tests that need no GPU, one binary: the bench's route on a
//! host plan, the CUDA kernels compiled with NVRTC, NCCL's loader on the
//! files vp2p writes, and the recorded reports of GPU runs. The tests that
//! need GPUs are `gpu.rs`, the binary `scripts/gpu.sh` carries to a GPU VM.

mod bench_route;
mod kernels_compile;
mod nccl_loader;
mod recorded;
