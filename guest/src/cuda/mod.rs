//! CUDA through cudarc's dynamically loaded driver API: the binary builds and
//! starts without CUDA, and says so instead of failing when the driver,
//! NVRTC or NCCL is absent.

pub mod kernels;
pub mod memory;
pub mod peer;
pub mod program;
pub mod rig;
pub mod stream;

use std::ffi::CStr;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, DriverError};
use p2p_topology::{Bdf, CudaOrdinal};

/// Why a CUDA call failed, naming the call and the GPU (by CUDA ordinal).
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// `libcuda.so` could not be loaded.
    #[error("the CUDA driver library (libcuda.so) is not installed or not in the loader path")]
    NoDriver,
    /// A driver call on one GPU failed.
    #[error("{call} on CUDA device {ordinal}: {source}")]
    Call {
        /// The driver function.
        call: &'static str,
        /// The GPU it was called for.
        ordinal: CudaOrdinal,
        /// The driver's error.
        source: DriverError,
    },
    /// A driver call not tied to one GPU failed.
    #[error("{call}: {source}")]
    Global {
        /// The driver function.
        call: &'static str,
        /// The driver's error.
        source: DriverError,
    },
    /// NVRTC refused the kernels' source.
    #[error("NVRTC could not compile the kernels for sm_{major}{minor}: {log}")]
    Compile {
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
        /// NVRTC's log.
        log: String,
    },
    /// `libnvrtc.so` could not be loaded.
    #[error("the NVRTC library (libnvrtc.so) is not installed or not in the loader path")]
    NoNvrtc,
    /// Something on one GPU that is not a failed call (a lost ping-pong, NCCL).
    #[error("CUDA device {ordinal}: {what}")]
    Device {
        /// The GPU.
        ordinal: CudaOrdinal,
        /// What happened.
        what: String,
    },
    /// A copy or kernel would reach past the end of a buffer; nothing was queued.
    #[error("CUDA device {ordinal}: {what} reaches past the end of a {bytes}-byte buffer")]
    Bounds {
        /// The buffer's GPU.
        ordinal: CudaOrdinal,
        /// The operation and its range.
        what: String,
        /// The buffer's size.
        bytes: usize,
    },
    /// No GPU was there to work on.
    #[error("no GPU to work on: CUDA sees none, or none was selected")]
    NoGpu,
}

impl CudaError {
    /// For `map_err`: a driver error from `call` on GPU `ordinal`.
    pub fn at(call: &'static str, ordinal: CudaOrdinal) -> impl FnOnce(DriverError) -> CudaError {
        move |source| CudaError::Call {
            call,
            ordinal,
            source,
        }
    }
}

/// Turns a driver status into a result naming the call and GPU.
pub(crate) fn check(
    status: sys::CUresult,
    call: &'static str,
    ordinal: CudaOrdinal,
) -> Result<(), CudaError> {
    status.result().map_err(|source| CudaError::Call {
        call,
        ordinal,
        source,
    })
}

/// True when `libcuda.so` can be loaded.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library by its known names.
    unsafe { sys::is_culib_present() }
}

/// True when `libnvrtc.so` can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library by its known names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// True when `libnccl.so` can be loaded.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to dlopen the library by its known names.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// One CUDA device with its primary context.
#[derive(Debug, Clone)]
pub struct Gpu {
    /// CUDA's device ordinal.
    pub ordinal: CudaOrdinal,
    /// Its PCI address, as the driver reports it.
    pub bdf: Bdf,
    /// The device's name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Its primary context.
    pub ctx: Arc<CudaContext>,
}

impl Gpu {
    /// The driver's device handle.
    pub fn cu_device(&self) -> sys::CUdevice {
        self.ctx.cu_device()
    }

    /// An integer device attribute (SM count, copy engines, ...).
    pub fn attribute(&self, attr: sys::CUdevice_attribute) -> Result<i32, CudaError> {
        self.ctx
            .attribute(attr)
            .map_err(CudaError::at("cuDeviceGetAttribute", self.ordinal))
    }
}

/// The driver and its GPUs, in CUDA ordinal order.
#[derive(Debug, Clone)]
pub struct Cuda {
    /// cuDriverGetVersion, for example 13000.
    pub driver_api: i32,
    /// Every GPU CUDA sees.
    pub gpus: Vec<Gpu>,
}

impl Cuda {
    /// Loads the driver, initialises it and opens every GPU's primary context.
    /// Event tracking is turned off: timed code orders its work itself.
    pub fn open() -> Result<Cuda, CudaError> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        result::init().map_err(|source| CudaError::Global {
            call: "cuInit",
            source,
        })?;
        let mut version = 0;
        // SAFETY: writes one int through a valid pointer.
        let status = unsafe { sys::cuDriverGetVersion(&mut version) };
        check(status, "cuDriverGetVersion", CudaOrdinal(0))?;
        let count = result::device::get_count().map_err(|source| CudaError::Global {
            call: "cuDeviceGetCount",
            source,
        })?;
        let mut gpus = Vec::new();
        for n in 0..count.max(0) as usize {
            let ordinal = CudaOrdinal(n);
            let call = |call, source| CudaError::Call {
                call,
                ordinal,
                source,
            };
            let ctx = CudaContext::new(n).map_err(|e| call("cuDevicePrimaryCtxRetain", e))?;
            // SAFETY: no stream of ours relies on cudarc's automatic event
            // tracking; every timed sequence synchronises explicitly.
            unsafe { ctx.disable_event_tracking() };
            let name = ctx.name().map_err(|e| call("cuDeviceGetName", e))?;
            let compute_capability = ctx
                .compute_capability()
                .map_err(|e| call("cuDeviceGetAttribute", e))?;
            let memory_bytes = ctx.total_mem().map_err(|e| call("cuDeviceTotalMem", e))? as u64;
            let bdf = pci_bus_id(ctx.cu_device(), ordinal)?;
            gpus.push(Gpu {
                ordinal,
                bdf,
                name,
                compute_capability,
                memory_bytes,
                ctx,
            });
        }
        Ok(Cuda {
            driver_api: version,
            gpus,
        })
    }
}

/// The PCI address of a device, as the driver reports it.
fn pci_bus_id(dev: sys::CUdevice, ordinal: CudaOrdinal) -> Result<Bdf, CudaError> {
    let mut buf = [0 as std::ffi::c_char; 32];
    // SAFETY: the buffer is 32 bytes and its length is passed; the driver
    // writes a NUL-terminated string no longer than that.
    let status = unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) };
    check(status, "cuDeviceGetPCIBusId", ordinal)?;
    // SAFETY: the driver NUL-terminated the string inside the buffer.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    text.to_ascii_lowercase()
        .parse()
        .map_err(|e| CudaError::Device {
            ordinal,
            what: format!("PCI bus id '{text}': {e}"),
        })
}
