//! The vfio-user server against the captured H200: what a client sees through
//! rust-vmm's own client, and how the server answers malformed messages.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use p2p_host::serve::wire::{cmd, FLAG_NO_REPLY, TYPE_REPLY};
use p2p_host::serve::{BarMemory, ServeEvent};
use p2p_test_support::vfio_user_client::{self as serve_common, assert_alive, serve_h200};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

const CONFIG: u32 = 7;

#[test]
fn rust_vmm_client_sees_the_gpu_with_the_capability() {
    let run = serve_h200(5);
    let mut c = vfio_user::Client::new(&run.socket).expect("vfio_user::Client connects");

    // Regions: config 4096 bytes, BAR0/2/4 mappable memory (BAR2 scaled to 256 MiB),
    // upper halves and the ROM absent.
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    assert_eq!(c.region(CONFIG).unwrap().size, 4096);
    for (index, size) in [(0, 16u64 << 20), (2, 256 << 20), (4, 32 << 20)] {
        let r = c.region(index).unwrap();
        assert_eq!(r.size, size, "BAR{index}");
        assert_eq!(
            r.flags & 7,
            rw | VFIO_REGION_INFO_FLAG_MMAP,
            "BAR{index} flags"
        );
        assert!(
            r.file_offset.is_some(),
            "BAR{index} comes with a descriptor to map"
        );
        assert_eq!(r.sparse_areas.len(), 1);
    }
    for index in [1, 3, 5, 6, 8] {
        assert_eq!(c.region(index).unwrap().size, 0, "region {index} is absent");
    }
    // Interrupts as the capabilities announce them.
    let counts: Vec<u32> = (0..5).map(|i| c.get_irq_info(i).unwrap().count).collect();
    assert_eq!(counts, [1, 16, 9, 1, 1]);

    // The capability, byte-exact, and the patched pointer of MSI-X (0xb0).
    let mut cap = [0u8; 8];
    c.region_read(CONFIG, 0xc8, &mut cap).unwrap();
    assert_eq!(
        u32::from_le_bytes(cap[..4].try_into().unwrap()),
        0x5008_0009
    );
    assert_eq!(
        u32::from_le_bytes(cap[4..].try_into().unwrap()),
        (5 << 19) | 0x5032
    );
    let mut next = [0u8; 1];
    c.region_read(CONFIG, 0xb1, &mut next).unwrap();
    assert_eq!(next[0], 0xc8);

    // Writes to them are dropped; a write to the command register is not.
    c.region_write(CONFIG, 0xc8, &[0xff; 8]).unwrap();
    c.region_write(CONFIG, 0xb1, &[0]).unwrap();
    c.region_write(CONFIG, 0x04, &[0x06, 0x00]).unwrap();
    let mut after = [0u8; 8];
    c.region_read(CONFIG, 0xc8, &mut after).unwrap();
    assert_eq!(after, cap);
    c.region_read(CONFIG, 0xb1, &mut next).unwrap();
    assert_eq!(next[0], 0xc8);
    let mut cmdreg = [0u8; 2];
    c.region_read(CONFIG, 0x04, &mut cmdreg).unwrap();
    assert_eq!(cmdreg, [0x06, 0x00]);

    // BARs size like hardware: all ones reads back the size mask.
    c.region_write(CONFIG, 0x18, &[0xff; 8]).unwrap();
    let mut bar = [0u8; 8];
    c.region_read(CONFIG, 0x18, &mut bar).unwrap();
    assert_eq!(u64::from_le_bytes(bar), 0xffff_ffff_f000_000c);
    c.region_write(CONFIG, 0x30, &[0xff; 4]).unwrap();
    let mut rom = [0u8; 4];
    c.region_read(CONFIG, 0x30, &mut rom).unwrap();
    assert_eq!(rom, [0; 4], "no ROM");

    // BAR memory reads back what was written, through messages and through the descriptor.
    c.region_write(2, 0x10_0000, b"vp2p").unwrap();
    let mut back = [0u8; 4];
    c.region_read(2, 0x10_0000, &mut back).unwrap();
    assert_eq!(&back, b"vp2p");
    let fd = c.region(2).unwrap().file_offset.as_ref().unwrap().file();
    let mut via_fd = [0u8; 4];
    fd.read_exact_at(&mut via_fd, 0x10_0000).unwrap();
    assert_eq!(&via_fd, b"vp2p");

    // DMA map with shared memory, unmap, reset.
    let ram = BarMemory::new("guest-ram", 1 << 20).unwrap();
    c.dma_map(0, 0x1000_0000, 1 << 20, ram_fd(&ram)).unwrap();
    c.dma_unmap(0x1000_0000, 1 << 20).unwrap();
    c.reset().unwrap();
    c.region_read(CONFIG, 0x04, &mut cmdreg).unwrap();
    assert_eq!(cmdreg, [0, 0], "reset clears the command register");
    c.region_read(CONFIG, 0xc8, &mut after).unwrap();
    assert_eq!(after, cap, "the capability survives a reset");
    drop(c);

    let events = run.events();
    assert!(events.contains(&ServeEvent::DroppedWrite {
        offset: 0xc8,
        len: 8
    }));
    assert!(events.contains(&ServeEvent::DroppedWrite {
        offset: 0xb1,
        len: 1
    }));
    assert!(events
        .iter()
        .any(|e| matches!(e, ServeEvent::DmaMap { shared: true, .. })));
}

fn ram_fd(m: &BarMemory) -> i32 {
    std::os::fd::AsFd::as_fd(m).as_raw_fd()
}

fn region_read_body(region: u32, offset: u64, count: u32) -> Vec<u8> {
    let mut b = offset.to_ne_bytes().to_vec();
    b.extend_from_slice(&region.to_ne_bytes());
    b.extend_from_slice(&count.to_ne_bytes());
    b
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn malformed_messages_get_error_replies_and_the_connection_stays_up() {
    let run = serve_h200(1);
    let mut c = run.connect_free();
    assert_eq!(c.version().errno(), None);
    let errno =
        |c: &mut serve_common::Raw, command: u16, body: &[u8]| c.call(command, body).errno();

    // Unknown and unsupported commands.
    assert_eq!(errno(&mut c, 0xbeef, &[]), Some(libc::ENOSYS));
    assert_eq!(errno(&mut c, 0, &[]), Some(libc::ENOSYS));
    assert_eq!(errno(&mut c, cmd::DMA_READ, &[0; 24]), Some(libc::ENOTSUP));
    assert_eq!(
        errno(&mut c, cmd::DEVICE_GET_REGION_IO_FDS, &[0; 16]),
        Some(libc::ENOTSUP)
    );
    // Bad region indexes, ranges and sizes.
    assert_eq!(c.region_read(42, 0, 4), Err(libc::EINVAL));
    assert_eq!(c.region_read(u32::MAX, 0, 4), Err(libc::EINVAL));
    assert_eq!(c.region_read(CONFIG, 4094, 4), Err(libc::EINVAL));
    assert_eq!(c.region_read(CONFIG, u64::MAX - 1, 4), Err(libc::EINVAL));
    assert_eq!(c.region_read(CONFIG, 0, 2 << 20), Err(libc::E2BIG));
    assert_eq!(c.region_read(6, 0, 4), Err(libc::EINVAL), "no ROM");
    assert_eq!(
        c.region_read(1, 0, 4),
        Err(libc::EINVAL),
        "upper half of BAR0"
    );
    assert_eq!(
        c.region_write(0, (16 << 20) - 2, &[1, 2, 3, 4]),
        Err(libc::EINVAL)
    );
    // A REGION_WRITE whose count disagrees with its payload; the payload is skipped.
    let mut body = region_read_body(CONFIG, 0x04, 8);
    body.extend_from_slice(&[0xff; 4]);
    assert_eq!(errno(&mut c, cmd::REGION_WRITE, &body), Some(libc::EINVAL));
    // Fixed-size commands of the wrong size.
    assert_eq!(errno(&mut c, cmd::REGION_READ, &[0; 8]), Some(libc::EINVAL));
    assert_eq!(
        errno(&mut c, cmd::DEVICE_GET_INFO, &[0; 40]),
        Some(libc::EINVAL)
    );
    assert_eq!(errno(&mut c, cmd::DMA_MAP, &[0; 31]), Some(libc::EINVAL));
    assert_eq!(
        errno(&mut c, cmd::DEVICE_RESET, &[0; 1]),
        Some(libc::EINVAL)
    );
    // VERSION without its fixed part, without capabilities, unterminated, not JSON.
    assert_eq!(errno(&mut c, cmd::VERSION, &[]), Some(libc::EINVAL));
    assert_eq!(
        errno(&mut c, cmd::VERSION, &[0, 0, 1, 0]),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno(&mut c, cmd::VERSION, b"\0\0\x01\0{}"),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno(&mut c, cmd::VERSION, b"\0\0\x01\0{\0}\0"),
        Some(libc::EINVAL)
    );
    let not_json = errno(&mut c, cmd::VERSION, b"\0\0\x01\0nope\0");
    assert!(
        matches!(not_json, Some(e) if e != 0),
        "an error with a real errno, got {not_json:?}"
    );
    // Region and interrupt info for indexes that do not exist.
    assert_eq!(
        errno(
            &mut c,
            cmd::DEVICE_GET_REGION_INFO,
            &u32s(&[32, 0, 9, 0, 0, 0, 0, 0])
        ),
        Some(libc::EINVAL)
    );
    assert_eq!(
        errno(&mut c, cmd::DEVICE_GET_IRQ_INFO, &u32s(&[16, 0, 5, 0])),
        Some(libc::EINVAL)
    );
    // SET_IRQS past the vectors, with boolean data, with descriptors it does not announce.
    let trigger = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD;
    assert_eq!(
        errno(&mut c, cmd::DEVICE_SET_IRQS, &u32s(&[20, trigger, 2, 8, 4])),
        Some(libc::EINVAL)
    );
    let boolean = VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_BOOL;
    assert_eq!(
        errno(&mut c, cmd::DEVICE_SET_IRQS, &u32s(&[20, boolean, 0, 0, 1])),
        Some(libc::ENOTSUP)
    );
    let f = File::open("/dev/null").unwrap();
    let id = c.send(
        cmd::REGION_READ,
        0,
        &region_read_body(CONFIG, 0, 4),
        None,
        &[f.as_raw_fd()],
    );
    let r = c.recv().unwrap();
    assert_eq!(
        (r.header.id, r.errno()),
        (id, Some(libc::EINVAL)),
        "descriptors on a REGION_READ"
    );
    // A reply sent to the server, and a read that asks for no reply.
    c.send(
        cmd::REGION_READ,
        TYPE_REPLY,
        &region_read_body(CONFIG, 0, 4),
        None,
        &[],
    );
    assert_eq!(c.recv().unwrap().errno(), Some(libc::EINVAL));
    c.send(
        cmd::REGION_READ,
        FLAG_NO_REPLY,
        &region_read_body(CONFIG, 0, 4),
        None,
        &[],
    );
    assert_eq!(c.recv().unwrap().errno(), Some(libc::EINVAL));

    // Still framed, still serving.
    assert_eq!(c.config_dword(0xc8), 0x5008_0009);
    assert_eq!(c.config_dword(0xcc), (1 << 19) | 0x5032);
    // A SET_IRQS that is fine: wire MSI-X vector 0 to an eventfd-like descriptor.
    let id = c.send(
        cmd::DEVICE_SET_IRQS,
        0,
        &u32s(&[20, trigger, 2, 0, 1]),
        None,
        &[f.as_raw_fd()],
    );
    let r = c.recv().unwrap();
    assert_eq!((r.header.id, r.errno()), (id, None));
    drop(c);
    assert_alive(&run);
    let rejected = run
        .events()
        .iter()
        .filter(|e| matches!(e, ServeEvent::Rejected { .. }))
        .count();
    // 28 answered by the guard; the one the crate refuses itself (not JSON) is not counted.
    assert!(rejected >= 28, "every rejection is reported ({rejected})");
}

#[test]
fn broken_streams_close_the_connection_not_the_server() {
    let run = serve_h200(0);
    // Garbage.
    let mut c = run.connect_free();
    c.write_raw(&[0x5a; 64]);
    drop(c);
    assert_alive(&run);
    // A truncated header, then end of stream.
    let mut c = run.connect_free();
    c.write_raw(&[1, 0, 1, 0, 32, 0, 0]);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(c.recv().is_none(), "closed without a reply");
    assert_alive(&run);
    // A header announcing fewer bytes than a header: answered, then closed.
    let mut c = run.connect_free();
    c.send(cmd::VERSION, 0, &[], Some(5), &[]);
    assert_eq!(c.recv().unwrap().errno(), Some(libc::EINVAL));
    assert!(c.recv().is_none());
    assert_alive(&run);
    // A header announcing 64 MiB.
    let mut c = run.connect_free();
    c.send(cmd::REGION_WRITE, 0, &[], Some(64 << 20), &[]);
    assert_eq!(c.recv().unwrap().errno(), Some(libc::EMSGSIZE));
    assert!(c.recv().is_none());
    assert_alive(&run);
    // A body shorter than announced, then end of stream.
    let mut c = run.connect_free();
    c.send(cmd::REGION_WRITE, 0, &[0; 30], Some(100), &[]);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    let r = c.recv().unwrap();
    assert_eq!(r.errno(), Some(libc::EINVAL));
    assert_alive(&run);
    let closed = run
        .events()
        .iter()
        .filter(|e| matches!(e, ServeEvent::Closed { .. }))
        .count();
    assert!(
        closed >= 4,
        "broken streams are reported ({closed}): {:?}",
        run.events()
    );
}

#[test]
fn a_second_client_is_refused_with_ebusy() {
    let run = serve_h200(2);
    let mut first = run.connect();
    assert_eq!(first.version().errno(), None);
    let mut second = run.connect();
    assert_eq!(second.version().errno(), Some(libc::EBUSY));
    assert!(second.recv().is_none(), "then closed");
    // The first is unaffected.
    assert_eq!(first.config_dword(0xc8), 0x5008_0009);
    drop(first);
    assert_alive(&run);
    assert!(run.events().contains(&ServeEvent::Refused));
}

/// Thousands of well-framed messages with random commands, flags and bodies:
/// each gets exactly one reply (an error or not), in order, and the server
/// keeps serving. A message the guard let through and the protocol code could
/// not take would end the connection here.
#[test]
fn random_framed_messages_each_get_one_reply() {
    let run = serve_h200(3);
    let mut c = run.connect_free();
    assert_eq!(c.version().errno(), None);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut errors = 0;
    for _ in 0..3000 {
        let command = (next() % 18) as u16;
        let len = match next() % 10 {
            0 => 0,
            1 => 4,
            2 => 16,
            3 => 20,
            4 => 24,
            5 => 32,
            6 => 36,
            _ => (next() % 200) as usize,
        };
        let mut body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Often aim at real regions, offsets and counts so some get through.
        if len >= 16 && next() % 2 == 0 {
            body[0..8].copy_from_slice(&(next() % 0x1000).to_ne_bytes());
            body[8..12].copy_from_slice(&((next() % 10) as u32).to_ne_bytes());
            body[12..16].copy_from_slice(&((next() % 64) as u32).to_ne_bytes());
        }
        let mut flags = (next() as u32) & !FLAG_NO_REPLY;
        if next() % 4 != 0 {
            flags &= !0xf; // a command, mostly
        }
        let id = c.send(command, flags, &body, None, &[]);
        let r = c.recv().expect("one reply per message");
        assert_eq!((r.header.id, r.header.command), (id, command));
        errors += usize::from(r.errno().is_some());
    }
    assert!(errors > 2000, "most random messages are refused ({errors})");
    assert_eq!(c.config_dword(0xc8), 0x5008_0009);
    drop(c);
    assert_alive(&run);
}
