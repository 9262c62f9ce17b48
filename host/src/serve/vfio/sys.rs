//! The one layer that talks to the kernel: every VFIO ioctl of the VFIO
//! backend is here, each `unsafe` block with the reason it is sound (the DMA
//! windows' `mmap`s are vm-memory's, in `dma`). Everything above works with
//! safe types.
//!
//! Ioctl numbers are `_IO(VFIO_TYPE, VFIO_BASE + n)` from `<linux/vfio.h>`;
//! `_IO` has no direction or size bits on x86-64 and arm64, the targets vp2p builds for.

use std::fs::File;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, RawFd};

use libc::c_ulong;
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_irq_info, vfio_region_info, VFIO_BASE, VFIO_TYPE,
};
use vm_memory::{Address, GuestAddress};

/// A virtual address in this process: where a window of the client's
/// memory is mapped, what the IOMMU translates the window's IOVA to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostVirtAddr(*mut u8);

impl HostVirtAddr {
    /// The address `ptr` points at.
    pub fn new(ptr: *mut u8) -> Self {
        Self(ptr)
    }

    /// The address as the kernel's ioctl structures take it.
    pub fn as_u64(self) -> u64 {
        self.0 as u64
    }
}

const fn io_nr(n: u32) -> c_ulong {
    ((VFIO_TYPE as c_ulong) << 8) | (VFIO_BASE + n) as c_ulong
}

const GET_API_VERSION: c_ulong = io_nr(0);
const CHECK_EXTENSION: c_ulong = io_nr(1);
const SET_IOMMU: c_ulong = io_nr(2);
const GROUP_GET_STATUS: c_ulong = io_nr(3);
const GROUP_SET_CONTAINER: c_ulong = io_nr(4);
const GROUP_GET_DEVICE_FD: c_ulong = io_nr(6);
const DEVICE_GET_INFO: c_ulong = io_nr(7);
const DEVICE_GET_REGION_INFO: c_ulong = io_nr(8);
const DEVICE_GET_IRQ_INFO: c_ulong = io_nr(9);
const DEVICE_SET_IRQS: c_ulong = io_nr(10);
const DEVICE_RESET: c_ulong = io_nr(11);
const IOMMU_MAP_DMA: c_ulong = io_nr(13);
const IOMMU_UNMAP_DMA: c_ulong = io_nr(14);

/// An ioctl's return value, or the errno it set.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `ioctl(fd, req, arg)` with an integer argument.
fn ioctl_val(fd: &File, req: c_ulong, arg: c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the VFIO ioctls called through here take an integer (or
    // nothing), never a pointer, so the kernel reads no user memory; `fd` is
    // an open descriptor for the call's duration.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) })
}

/// `ioctl(fd, req, &mut arg)` for a `#[repr(C)]` structure the kernel reads
/// and writes, of the size its `argsz` field announces.
fn ioctl_mut<T>(fd: &File, req: c_ulong, arg: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: `arg` is a valid, exclusively borrowed `T` for the call, and
    // every caller passes the kernel structure the request expects with
    // `argsz` at most `size_of::<T>()` (or the larger buffer behind it, see
    // `region_info`), so the kernel stays inside it.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg as *mut T) })
}

/// `VFIO_GET_API_VERSION` on a container.
pub fn api_version(container: &File) -> io::Result<i32> {
    ioctl_val(container, GET_API_VERSION, 0)
}

/// `VFIO_CHECK_EXTENSION`: whether the container supports `ext` (an IOMMU type).
pub fn check_extension(container: &File, ext: u32) -> io::Result<bool> {
    Ok(ioctl_val(container, CHECK_EXTENSION, c_ulong::from(ext))? > 0)
}

/// `VFIO_SET_IOMMU`.
pub fn set_iommu(container: &File, kind: u32) -> io::Result<()> {
    ioctl_val(container, SET_IOMMU, c_ulong::from(kind)).map(drop)
}

/// `VFIO_GROUP_GET_STATUS`: the group's flags.
pub fn group_status(group: &File) -> io::Result<u32> {
    let mut s = vfio_group_status {
        argsz: size_of::<vfio_group_status>() as u32,
        flags: 0,
    };
    ioctl_mut(group, GROUP_GET_STATUS, &mut s)?;
    Ok(s.flags)
}

/// `VFIO_GROUP_SET_CONTAINER`.
pub fn group_set_container(group: &File, container: &File) -> io::Result<()> {
    let mut fd: RawFd = container.as_raw_fd();
    ioctl_mut(group, GROUP_SET_CONTAINER, &mut fd).map(drop)
}

/// `VFIO_GROUP_GET_DEVICE_FD` for the device named `name` (its PCI address).
pub fn group_device_fd(group: &File, name: &str) -> io::Result<File> {
    let name = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "device name has a NUL"))?;
    // SAFETY: the request takes a NUL-terminated string, which `name` is and
    // which outlives the call; the kernel only reads it.
    let fd = check(unsafe { libc::ioctl(group.as_raw_fd(), GROUP_GET_DEVICE_FD, name.as_ptr()) })?;
    // SAFETY: on success the ioctl returns a new descriptor nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `VFIO_DEVICE_GET_INFO`.
pub fn device_info(device: &File) -> io::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    ioctl_mut(device, DEVICE_GET_INFO, &mut info)?;
    Ok(info)
}

/// `VFIO_DEVICE_GET_REGION_INFO`, with the capability chain: the info and
/// the bytes that follow it (offsets in the chain count from the start of
/// the info, so `caps[cap_offset - size_of::<vfio_region_info>()]` is the
/// first capability).
pub fn region_info(device: &File, index: u32) -> io::Result<(vfio_region_info, Vec<u8>)> {
    let head = size_of::<vfio_region_info>();
    let mut info = vfio_region_info {
        argsz: head as u32,
        index,
        ..Default::default()
    };
    ioctl_mut(device, DEVICE_GET_REGION_INFO, &mut info)?;
    let want = info.argsz as usize;
    if want <= head {
        return Ok((info, Vec::new()));
    }
    // A buffer of u64s: aligned for the structure and the capabilities.
    let mut buf = vec![0u64; want.div_ceil(8)];
    let first = vfio_region_info {
        argsz: want as u32,
        index,
        ..Default::default()
    };
    // SAFETY: `buf` is at least `want >= head` bytes, 8-aligned, so it holds
    // a `vfio_region_info` at its start; `write_unaligned` needs no alignment anyway.
    unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast::<vfio_region_info>(), first) };
    // SAFETY: the kernel writes at most `argsz == want` bytes, which `buf` holds.
    check(unsafe { libc::ioctl(device.as_raw_fd(), DEVICE_GET_REGION_INFO, buf.as_mut_ptr()) })?;
    // SAFETY: as above, a `vfio_region_info` lies at the start of `buf`.
    let info = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast::<vfio_region_info>()) };
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let end = (info.argsz as usize).min(want);
    Ok((info, bytes[head..end].to_vec()))
}

/// `VFIO_DEVICE_GET_IRQ_INFO`.
pub fn irq_info(device: &File, index: u32) -> io::Result<vfio_irq_info> {
    let mut info = vfio_irq_info {
        argsz: size_of::<vfio_irq_info>() as u32,
        index,
        ..Default::default()
    };
    ioctl_mut(device, DEVICE_GET_IRQ_INFO, &mut info)?;
    Ok(info)
}

/// `VFIO_DEVICE_SET_IRQS` with `data` after the header: eventfds (`i32`
/// each, -1 to unwire a vector) or nothing.
pub fn set_irqs(
    device: &File,
    index: u32,
    flags: u32,
    start: u32,
    count: u32,
    fds: &[RawFd],
) -> io::Result<()> {
    // argsz, flags, index, start, count, then the data: 20 bytes + 4 a fd.
    let mut words: Vec<u32> = vec![0, flags, index, start, count];
    words.extend(fds.iter().map(|&fd| fd as u32));
    words[0] = (words.len() * 4) as u32;
    // SAFETY: `words` is a `vfio_irq_set` (five u32 fields) followed by its
    // `argsz - 20` data bytes, 4-aligned as the structure is; the kernel
    // reads no more than `argsz` bytes and writes none.
    check(unsafe { libc::ioctl(device.as_raw_fd(), DEVICE_SET_IRQS, words.as_mut_ptr()) }).map(drop)
}

/// `VFIO_DEVICE_RESET`.
pub fn reset(device: &File) -> io::Result<()> {
    ioctl_val(device, DEVICE_RESET, 0).map(drop)
}

/// `VFIO_IOMMU_MAP_DMA`: `size` bytes at `vaddr` in this process appear at `iova`.
pub fn map_dma(
    container: &File,
    vaddr: HostVirtAddr,
    iova: GuestAddress,
    size: u64,
    flags: u32,
) -> io::Result<()> {
    let mut m = vfio_iommu_type1_dma_map {
        argsz: size_of::<vfio_iommu_type1_dma_map>() as u32,
        flags,
        vaddr: vaddr.as_u64(),
        iova: iova.raw_value(),
        size,
    };
    ioctl_mut(container, IOMMU_MAP_DMA, &mut m).map(drop)
}

/// `VFIO_IOMMU_UNMAP_DMA`: returns the bytes the kernel unmapped.
pub fn unmap_dma(container: &File, iova: GuestAddress, size: u64) -> io::Result<u64> {
    let mut u = vfio_iommu_type1_dma_unmap {
        argsz: size_of::<vfio_iommu_type1_dma_unmap>() as u32,
        flags: 0,
        iova: iova.raw_value(),
        size,
        ..Default::default()
    };
    ioctl_mut(container, IOMMU_UNMAP_DMA, &mut u)?;
    Ok(u.size)
}
