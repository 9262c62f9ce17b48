//! What must hold for ANY bytes handed to `ConfigSpace` and its walkers.
//!
//! Checked by the `walkers` fuzz target and by the walker property tests of
//! p2p-topology, so the property tests and the fuzzer check one list of
//! invariants. Only `p2p_topology` and std are used here.

use p2p_topology::pci::{
    AcsFlags, CapabilityEntry, ConfigError, ConfigSpace, ExtCapabilityEntry, LenSource,
    PciePortType, WalkError, CONFIG_EXTENDED_LEN as EXT, CONFIG_HEADER_LEN as HDR,
    CONFIG_LEGACY_LEN as LEGACY,
};

/// At most one standard capability per dword of 0x40..0x100.
pub const MAX_STD_CAPS: usize = (LEGACY - HDR) / 4;
/// At most one extended capability per dword of 0x100..0x1000.
pub const MAX_EXT_CAPS: usize = (EXT - LEGACY) / 4;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// Checks every walker and accessor on `bytes`; Err names the broken invariant.
/// Never panics on its own: a panic can only come from the code under test.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let cs = match ConfigSpace::new(bytes) {
        Ok(cs) => cs,
        Err(ConfigError::ShorterThanHeader(n)) => {
            ensure!(
                n == bytes.len() && n < HDR,
                "ShorterThanHeader({n}) for {} bytes",
                bytes.len()
            );
            return Ok(());
        }
        Err(ConfigError::NoFunction) => {
            ensure!(
                bytes.len() >= HDR && bytes[..2] == [0xff, 0xff],
                "NoFunction with vendor {:02x?}",
                &bytes[..2]
            );
            return Ok(());
        }
    };
    let std = cs.capabilities();
    match &std {
        Ok(caps) => check_std_list(&cs, caps)?,
        Err(e) => check_std_error(&cs, e)?,
    }
    let ext = cs.extended_capabilities();
    match &ext {
        Ok(caps) => check_ext_list(&cs, caps)?,
        Err(e) => check_ext_error(&cs, e)?,
    }
    ensure!(
        cs.capabilities() == std,
        "standard walker is not deterministic"
    );
    ensure!(
        cs.extended_capabilities() == ext,
        "extended walker is not deterministic"
    );
    check_accessors(&cs, &std, &ext)
}

/// Each walker sees only its own region: the standard list the first 256 bytes,
/// the extended list the first 4096. Bytes past a region never change a result.
pub fn check_regions(bytes: &[u8]) -> Result<(), String> {
    let Ok(cs) = ConfigSpace::new(bytes) else {
        return Ok(());
    };
    if bytes.len() > LEGACY {
        let legacy = ConfigSpace::new(&bytes[..LEGACY]).expect("same header");
        let (whole, cut) = (cs.capabilities(), legacy.capabilities());
        ensure!(
            whole == cut,
            "standard list read past 0x100: {whole:?} with {} bytes, {cut:?} with 256",
            bytes.len()
        );
    }
    if bytes.len() > EXT {
        let pcie = ConfigSpace::new(&bytes[..EXT]).expect("same header");
        let (whole, cut) = (cs.extended_capabilities(), pcie.extended_capabilities());
        ensure!(
            whole == cut,
            "extended list read past 0x1000: {whole:?} with {} bytes, {cut:?} with 4096",
            bytes.len()
        );
    }
    Ok(())
}

/// The register that holds the first standard pointer.
fn std_pointer_register(cs: &ConfigSpace<'_>) -> usize {
    if cs.header_type() == 2 {
        0x14
    } else {
        0x34
    }
}

/// End of the byte range that `UpToNext` promises: the nearest capability that
/// starts after `offset`, else the region's end, never less than `min_len`.
fn up_to_next(
    offset: usize,
    starts: impl Iterator<Item = usize>,
    region_end: usize,
    min_len: usize,
) -> usize {
    starts
        .filter(|&s| s > offset)
        .min()
        .unwrap_or(region_end)
        .max(offset + min_len)
}

fn check_std_list(cs: &ConfigSpace<'_>, caps: &[CapabilityEntry]) -> Result<(), String> {
    let bytes = cs.bytes();
    if !cs.has_capability_list() {
        ensure!(
            caps.is_empty(),
            "status bit 4 clear, yet {} capabilities",
            caps.len()
        );
        return Ok(());
    }
    ensure!(
        caps.len() <= MAX_STD_CAPS,
        "{} standard capabilities",
        caps.len()
    );
    let first = bytes[std_pointer_register(cs)] & 0xfc;
    ensure!(
        caps.first().map_or(0, |c| c.offset) == first,
        "list starts at {:?}, pointer says {first:#x}",
        caps.first()
    );
    let region_end = bytes.len().min(LEGACY);
    let mut seen = [false; LEGACY];
    for (i, c) in caps.iter().enumerate() {
        let off = usize::from(c.offset);
        ensure!(off >= HDR && off % 4 == 0, "capability at {off:#x}");
        ensure!(
            off + 2 <= region_end,
            "capability at {off:#x} read past the {} bytes",
            bytes.len()
        );
        ensure!(
            c.len >= 2 && c.end() <= LEGACY,
            "capability at {off:#x} of {} bytes",
            c.len
        );
        ensure!(!seen[off], "offset {off:#x} listed twice");
        seen[off] = true;
        ensure!(
            c.id == bytes[off] && c.next == bytes[off + 1] & 0xfc,
            "entry {c:?} disagrees with its bytes"
        );
        let follow = caps.get(i + 1).map_or(0, |n| n.offset);
        ensure!(c.next == follow, "entry {c:?} is followed by {follow:#x}");
        if c.len_source == LenSource::UpToNext {
            let end = up_to_next(
                off,
                caps.iter().map(|o| usize::from(o.offset)),
                region_end,
                2,
            );
            ensure!(
                c.end() == end,
                "{c:?} is UpToNext but ends at {:#x}, not {end:#x}",
                c.end()
            );
        }
    }
    Ok(())
}

fn check_std_error(cs: &ConfigSpace<'_>, e: &WalkError) -> Result<(), String> {
    let bytes = cs.bytes();
    ensure!(cs.has_capability_list(), "{e:?} without a capability list");
    // A pointer sits in the pointer register or at +1 of a capability.
    let pointer_at = |at: u16| -> Result<u16, String> {
        let at = usize::from(at);
        ensure!(
            at == std_pointer_register(cs) || (at > HDR && at < LEGACY && at % 4 == 1),
            "pointer register {at:#x}"
        );
        Ok(u16::from(bytes[at] & 0xfc))
    };
    match *e {
        WalkError::PointerIntoHeader { at, ptr } => {
            ensure!(
                pointer_at(at)? == ptr && ptr != 0 && usize::from(ptr) < HDR,
                "{e:?}"
            );
        }
        WalkError::PastEnd { at, ptr, len } => {
            ensure!(
                len == bytes.len() && len < LEGACY,
                "{e:?} with {} bytes",
                bytes.len()
            );
            ensure!(
                pointer_at(at)? == ptr && usize::from(ptr) >= HDR && usize::from(ptr) + 2 > len,
                "{e:?}"
            );
        }
        WalkError::Loop { at, ptr } => {
            ensure!(pointer_at(at)? == ptr && usize::from(ptr) >= HDR, "{e:?}");
        }
        WalkError::Overrun {
            id,
            offset,
            len,
            end,
        } => {
            let off = usize::from(offset);
            ensure!(
                end == LEGACY && off >= HDR && off % 4 == 0 && off + usize::from(len) > end,
                "{e:?}"
            );
            ensure!(
                bytes.get(off).map(|&b| u16::from(b)) == Some(id),
                "{e:?}: id disagrees with its bytes"
            );
        }
    }
    Ok(())
}

/// Header dword of an extended capability.
fn ext_header(cs: &ConfigSpace<'_>, off: usize) -> u32 {
    cs.u32_at(off).unwrap_or(0)
}

fn check_ext_list(cs: &ConfigSpace<'_>, caps: &[ExtCapabilityEntry]) -> Result<(), String> {
    let first = ext_header(cs, LEGACY);
    if !cs.has_extended_space() || first == 0 || first == u32::MAX {
        ensure!(
            caps.is_empty(),
            "{} extended capabilities without extended space",
            caps.len()
        );
        return Ok(());
    }
    ensure!(
        caps.len() <= MAX_EXT_CAPS,
        "{} extended capabilities",
        caps.len()
    );
    ensure!(
        caps.first().map(|c| usize::from(c.offset)) == Some(LEGACY),
        "extended list starts at {:?}",
        caps.first()
    );
    let mut seen = vec![false; EXT];
    for (i, c) in caps.iter().enumerate() {
        let off = usize::from(c.offset);
        ensure!(
            off >= LEGACY && off % 4 == 0,
            "extended capability at {off:#x}"
        );
        ensure!(
            c.len >= 4 && c.end() <= EXT,
            "extended capability at {off:#x} of {} bytes",
            c.len
        );
        ensure!(!seen[off], "offset {off:#x} listed twice");
        seen[off] = true;
        let h = ext_header(cs, off);
        let fields = (u32::from(c.id), u32::from(c.version), u32::from(c.next));
        ensure!(
            fields == (h & 0xffff, (h >> 16) & 0xf, (h >> 20) & 0xffc),
            "entry {c:?} disagrees with header {h:#010x}"
        );
        let follow = caps.get(i + 1).map_or(0, |n| n.offset);
        ensure!(c.next == follow, "entry {c:?} is followed by {follow:#x}");
        if c.len_source == LenSource::UpToNext {
            let end = up_to_next(off, caps.iter().map(|o| usize::from(o.offset)), EXT, 4);
            ensure!(
                c.end() == end,
                "{c:?} is UpToNext but ends at {:#x}, not {end:#x}",
                c.end()
            );
        }
    }
    Ok(())
}

fn check_ext_error(cs: &ConfigSpace<'_>, e: &WalkError) -> Result<(), String> {
    ensure!(cs.has_extended_space(), "{e:?} without extended space");
    // A pointer sits in bits 31:20 of a header: `at` is the header's offset + 2.
    let pointer_at = |at: u16| -> Result<u16, String> {
        let at = usize::from(at);
        ensure!(
            at > LEGACY && at < EXT && at % 4 == 2,
            "pointer register {at:#x}"
        );
        Ok(((ext_header(cs, at - 2) >> 20) & 0xffc) as u16)
    };
    match *e {
        WalkError::PointerIntoHeader { at, ptr } => {
            ensure!(
                pointer_at(at)? == ptr && ptr != 0 && usize::from(ptr) < LEGACY,
                "{e:?}"
            );
        }
        // 12-bit pointers reach at most 0xffc, whose header ends at 0x1000.
        WalkError::PastEnd { .. } => return Err(format!("{e:?} cannot happen with 4096 bytes")),
        WalkError::Loop { at, ptr } => {
            ensure!(
                pointer_at(at)? == ptr && usize::from(ptr) >= LEGACY,
                "{e:?}"
            );
        }
        WalkError::Overrun {
            id,
            offset,
            len,
            end,
        } => {
            let off = usize::from(offset);
            ensure!(
                end == EXT && off >= LEGACY && off % 4 == 0 && off + usize::from(len) > end,
                "{e:?}"
            );
            ensure!(
                ext_header(cs, off) & 0xffff == u32::from(id),
                "{e:?}: id disagrees with its header"
            );
        }
    }
    Ok(())
}

type StdResult = Result<Vec<CapabilityEntry>, WalkError>;
type ExtResult = Result<Vec<ExtCapabilityEntry>, WalkError>;

fn check_accessors(cs: &ConfigSpace<'_>, std: &StdResult, ext: &ExtResult) -> Result<(), String> {
    let bytes = cs.bytes();
    let std_find = |id: u8| std.clone().map(|c| c.into_iter().find(|c| c.id == id));
    let ext_find = |id: u16| ext.clone().map(|c| c.into_iter().find(|c| c.id == id));
    // Every id the list holds, plus ones it may lack.
    let mut ids: Vec<u8> = vec![0x01, 0x05, 0x09, 0x10, 0x11];
    ids.extend(std.iter().flatten().map(|c| c.id));
    for id in ids {
        ensure!(
            cs.find_capability(id) == std_find(id),
            "find_capability({id:#x})"
        );
    }
    let mut ext_ids: Vec<u16> = vec![0x0001, 0x000b, 0x000d, 0x0015, 0x0023];
    ext_ids.extend(ext.iter().flatten().map(|c| c.id));
    for id in ext_ids {
        ensure!(
            cs.find_extended_capability(id) == ext_find(id),
            "find_extended_capability({id:#x})"
        );
    }

    let pcie = std_find(0x10);
    let port = pcie.clone().map(|c| {
        c.and_then(|c| cs.u8_at(usize::from(c.offset) + 2))
            .map(|flags| PciePortType::from_bits(flags >> 4))
    });
    ensure!(
        cs.pcie_port_type() == port,
        "pcie_port_type {:?}, walker says {pcie:?}",
        cs.pcie_port_type()
    );
    match (cs.link_status(), &pcie) {
        (Err(e), Err(w)) => ensure!(e == *w, "link_status error {e:?}, walker {w:?}"),
        (Ok(None), Ok(_)) => {}
        (Ok(Some(ls)), Ok(Some(c))) => {
            let raw = cs.u16_at(usize::from(c.offset) + 0x12).unwrap_or(0);
            ensure!(
                u16::from(ls.width) == (raw >> 4) & 0x3f,
                "link width {ls:?} from {raw:#06x}"
            );
            ensure!(
                [2.5, 5.0, 8.0, 16.0, 32.0, 64.0].contains(&ls.speed_gts),
                "link speed {ls:?}"
            );
        }
        (got, walked) => return Err(format!("link_status {got:?}, walker {walked:?}")),
    }

    let acs_cap = ext_find(0x000d);
    match (cs.acs(), &acs_cap) {
        (Err(e), Err(w)) => ensure!(e == *w, "acs error {e:?}, walker {w:?}"),
        (Ok(None), Ok(None)) => {}
        (Ok(got), Ok(Some(c))) => {
            let off = usize::from(c.offset);
            let want = cs.u16_at(off + 4).zip(cs.u16_at(off + 6));
            ensure!(
                got.map(|a| (a.offset, a.capability, a.control))
                    == want.map(|(k, t)| (
                        c.offset,
                        AcsFlags::from_bits(k),
                        AcsFlags::from_bits(t)
                    )),
                "acs {got:?} at {off:#x}"
            );
            if let Some(a) = got {
                ensure!(
                    a.capability.bits() == bytes[off + 4] as u16 & 0x7f,
                    "AcsFlags round trip"
                );
            }
        }
        (got, walked) => return Err(format!("acs {got:?}, walker {walked:?}")),
    }
    Ok(())
}
