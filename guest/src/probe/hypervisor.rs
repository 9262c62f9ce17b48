//! Is a hypervisor visible? The NVIDIA driver checks the P2P capability only
//! when CPUID says so (leaf 1 ECX bit 31, signature at leaf 0x40000000).

pub use p2p_report::probe::HypervisorInfo;

/// Reads CPUID on this CPU.
#[cfg(target_arch = "x86_64")]
pub fn detect() -> HypervisorInfo {
    use std::arch::x86_64::__cpuid;
    // CPUID exists on every x86-64 CPU and leaf 1 always answers.
    let leaf1 = __cpuid(1);
    let present_bit = leaf1.ecx & (1 << 31) != 0;
    let signature = present_bit.then(|| {
        // With the hypervisor bit set, leaf 0x40000000 holds the signature.
        let l = __cpuid(0x4000_0000);
        let bytes: Vec<u8> = [l.ebx, l.ecx, l.edx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .collect();
        String::from_utf8_lossy(&bytes)
            .trim_end_matches('\0')
            .to_string()
    });
    HypervisorInfo {
        present_bit,
        signature,
    }
}

/// Other architectures: the driver's check is x86-specific; report nothing.
#[cfg(not(target_arch = "x86_64"))]
pub fn detect() -> HypervisorInfo {
    HypervisorInfo {
        present_bit: false,
        signature: None,
    }
}
