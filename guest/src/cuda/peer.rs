//! What the driver says about peer access between two GPUs, and turning it on.

use cudarc::driver::sys;
use p2p_topology::CudaOrdinal;
use serde::{Deserialize, Serialize};

use super::memory::bind;
use super::{check, CudaError, Gpu};

/// The driver's view of one ordered pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PeerAnswer {
    /// The accessing GPU.
    pub src: CudaOrdinal,
    /// The GPU whose memory it would access.
    pub dst: CudaOrdinal,
    /// cuDeviceCanAccessPeer(src, dst).
    pub can_access: bool,
    /// CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK.
    pub performance_rank: i32,
    /// CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED.
    pub access_supported: bool,
    /// CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED.
    pub native_atomics: bool,
}

fn attribute(src: &Gpu, dst: &Gpu, attr: sys::CUdevice_P2PAttribute) -> Result<i32, CudaError> {
    let mut v = 0;
    // SAFETY: writes one int; both devices are valid handles.
    let status =
        unsafe { sys::cuDeviceGetP2PAttribute(&mut v, attr, src.cu_device(), dst.cu_device()) };
    check(status, "cuDeviceGetP2PAttribute", src.ordinal)?;
    Ok(v)
}

/// Asks the driver about `src` accessing `dst`.
pub fn query(src: &Gpu, dst: &Gpu) -> Result<PeerAnswer, CudaError> {
    let mut can = 0;
    // SAFETY: writes one int; both devices are valid handles.
    let status = unsafe { sys::cuDeviceCanAccessPeer(&mut can, src.cu_device(), dst.cu_device()) };
    check(status, "cuDeviceCanAccessPeer", src.ordinal)?;
    use sys::CUdevice_P2PAttribute as A;
    Ok(PeerAnswer {
        src: src.ordinal,
        dst: dst.ordinal,
        can_access: can != 0,
        performance_rank: attribute(src, dst, A::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK)?,
        access_supported: attribute(src, dst, A::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)? != 0,
        native_atomics: attribute(src, dst, A::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)?
            != 0,
    })
}

/// Lets `src`'s context access `dst`'s memory. Already enabled is success.
pub fn enable(src: &Gpu, dst: &Gpu) -> Result<(), CudaError> {
    bind(&src.ctx, src.ordinal)?;
    // SAFETY: src's context is current; dst's context is a live primary context.
    let status = unsafe { sys::cuCtxEnablePeerAccess(dst.ctx.cu_ctx(), 0) };
    if status == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check(status, "cuCtxEnablePeerAccess", src.ordinal)
}

/// Revokes `src`'s access to `dst`'s memory. Not enabled is success.
pub fn disable(src: &Gpu, dst: &Gpu) -> Result<(), CudaError> {
    bind(&src.ctx, src.ordinal)?;
    // SAFETY: src's context is current; dst's context is a live primary context.
    let status = unsafe { sys::cuCtxDisablePeerAccess(dst.ctx.cu_ctx()) };
    if status == sys::CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED {
        return Ok(());
    }
    check(status, "cuCtxDisablePeerAccess", src.ordinal)
}
