//! Guest memories shared with workers: `SharedMemory`, `locate`, `Worker::write_from` /
//! `read_into` through real emu worker processes.

use std::time::Duration;

use crate::support::*;
use tasklet_worker::guest_memory::{locate, SharedMemory};
use tasklet_worker::{ErrorKind, Launch, WorkerError};

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as u8
        })
        .collect()
}

#[test]
fn write_from_and_read_into_round_trip() {
    let mem = SharedMemory::create(16 * MIB, 64 * MIB, 64 * 1024).unwrap();
    let mut w = emu_worker(512 << 20);
    let n = 5 * MIB + 123;
    let data = pattern(n, 7);
    bytes(&mem, 4096 + 1, n).copy_from_slice(&data);
    let dev = w.alloc(n as u64).unwrap();
    w.write_from(dev, &span(&mem, 4096 + 1, n)).unwrap();
    assert_eq!(w.attached_memories(), 1);
    // The device holds the bytes (read back the old way).
    let mut back = vec![0u8; n];
    w.read(dev, &mut back).unwrap();
    assert!(back == data, "device contents differ from what was written");
    // And they come back into another part of the memory, in place.
    w.read_into(dev, &span(&mem, 8 * MIB, n)).unwrap();
    assert!(
        bytes(&mem, 8 * MIB, n) == &data[..],
        "read_into did not fill the guest memory"
    );
    // A part of the device range, into an unaligned spot.
    w.read_into(dev + 1000, &span(&mem, 3, 777)).unwrap();
    assert_eq!(bytes(&mem, 3, 777), &data[1000..1777]);
    // Empty spans are fine and copy nothing.
    w.write_from(dev, &span(&mem, 0, 0)).unwrap();
    assert_eq!(w.attached_memories(), 1, "one memory, attached once");
}

#[test]
fn spans_across_64_mib_chunk_boundaries() {
    // 64 MiB is the cuda backend's registration chunk; the emulator must not care either.
    let mem = SharedMemory::create(80 * MIB, 80 * MIB, 0).unwrap();
    let mut w = emu_worker(512 << 20);
    let (off, n) = (60 * MIB + 5, 9 * MIB);
    let data = pattern(n, 11);
    bytes(&mem, off, n).copy_from_slice(&data);
    let dev = w.alloc(n as u64).unwrap();
    w.write_from(dev, &span(&mem, off, n)).unwrap();
    bytes(&mem, off, n).fill(0);
    w.read_into(dev, &span(&mem, off, n)).unwrap();
    assert!(bytes(&mem, off, n) == &data[..]);
}

#[test]
fn memory_grown_after_attach_is_usable_and_reads_as_zeros() {
    let mut mem = SharedMemory::create(MIB, 32 * MIB, 64 * 1024).unwrap();
    let base = mem.as_ptr();
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(8 * MIB as u64).unwrap();
    bytes(&mem, 0, 16).copy_from_slice(&[9; 16]);
    w.write_from(dev, &span(&mem, 0, 16)).unwrap();
    // Not there yet.
    assert!(locate(base.wrapping_add(2 * MIB), 16).is_none());
    mem.grow_to(12 * MIB).unwrap();
    assert_eq!(mem.as_ptr(), base, "growth never moves the memory");
    assert_eq!(mem.size(), 12 * MIB);
    assert!(
        bytes(&mem, MIB, 11 * MIB).iter().all(|&b| b == 0),
        "grown memory is zeroed"
    );
    let data = pattern(6 * MIB, 3);
    bytes(&mem, 5 * MIB, 6 * MIB).copy_from_slice(&data);
    // The worker mapped the memory when it was 1 MiB; it must see the grown part.
    w.write_from(dev, &span(&mem, 5 * MIB, 6 * MIB)).unwrap();
    let mut back = vec![0u8; 6 * MIB];
    w.read(dev, &mut back).unwrap();
    assert!(back == data);
    w.read_into(dev, &span(&mem, 0, 6 * MIB)).unwrap();
    assert!(bytes(&mem, 0, 6 * MIB) == &data[..]);
    // Growth is bounded by the reservation and refuses to shrink.
    assert!(mem.grow_to(33 * MIB).is_err());
    assert!(mem.grow_to(MIB).is_err());
    assert!(mem.grow_to(12 * MIB + 1).is_err());
    assert_eq!(mem.size(), 12 * MIB);
}

#[test]
fn locate_finds_only_ranges_inside_a_live_memory() {
    let mem = SharedMemory::create(2 * MIB, 8 * MIB, 64 * 1024).unwrap();
    let b = mem.as_ptr();
    let s = locate(b, 2 * MIB).expect("the whole memory");
    assert_eq!((s.offset(), s.len(), s.memory_id()), (0, 2 * MIB, mem.id()));
    assert!(!s.is_empty());
    let s = locate(b.wrapping_add(100), 50).unwrap();
    assert_eq!((s.offset(), s.len()), (100, 50));
    assert!(
        locate(b.wrapping_add(2 * MIB), 0).is_some(),
        "empty at the end"
    );
    assert!(
        locate(b.wrapping_add(2 * MIB - 1), 2).is_none(),
        "straddling the size"
    );
    assert!(
        locate(b.wrapping_add(2 * MIB), 1).is_none(),
        "past the size"
    );
    assert!(
        locate(b.wrapping_add(7 * MIB), 1).is_none(),
        "in the room to grow"
    );
    assert!(
        locate(b.wrapping_add(8 * MIB + 10), 1).is_none(),
        "in the guard"
    );
    assert!(
        locate(b.wrapping_sub(1), 2).is_none(),
        "straddling the start"
    );
    assert!(
        locate(b.wrapping_sub(4096), 1).is_none(),
        "before the memory"
    );
    assert!(locate(b, usize::MAX).is_none(), "overflowing length");
    let heap = [0u8; 64];
    assert!(locate(heap.as_ptr(), 64).is_none(), "ordinary memory");
    // Two memories side by side are told apart.
    let other = SharedMemory::create(MIB, MIB, 0).unwrap();
    assert_eq!(locate(other.as_ptr(), MIB).unwrap().memory_id(), other.id());
    assert_ne!(other.id(), mem.id());
    // A span outlives nothing: once the memory is gone, nothing is found there.
    drop(mem);
    assert!(locate(b, 1).is_none(), "a dropped memory");
}

#[test]
fn create_refuses_bad_geometry() {
    assert!(SharedMemory::create(100, 4096, 0).is_err());
    assert!(SharedMemory::create(8192, 4096, 0).is_err());
    assert!(SharedMemory::create(4096, 4096, 17).is_err());
    assert!(SharedMemory::create(0, usize::MAX - 4095, 4096).is_err());
    let m = SharedMemory::create(0, 0, 4096).unwrap();
    assert_eq!((m.size(), m.capacity()), (0, 0));
}

#[test]
fn out_of_bounds_device_ranges_are_refused_and_write_nothing() {
    let mem = SharedMemory::create(MIB, MIB, 0).unwrap();
    bytes(&mem, 0, MIB).fill(0xab);
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(4096).unwrap();
    assert_eq!(
        op_kind(w.write_from(dev, &span(&mem, 0, 8192))),
        ErrorKind::OutOfBounds
    );
    assert_eq!(
        op_kind(w.write_from(dev + 4000, &span(&mem, 0, 97))),
        ErrorKind::OutOfBounds
    );
    assert_eq!(
        op_kind(w.write_from(u64::MAX - 10, &span(&mem, 0, 97))),
        ErrorKind::OutOfBounds
    );
    let mut back = vec![1u8; 4096];
    w.read(dev, &mut back).unwrap();
    assert!(
        back.iter().all(|&b| b == 0),
        "a refused write wrote something"
    );
    assert_eq!(
        op_kind(w.read_into(dev, &span(&mem, 0, 4097))),
        ErrorKind::OutOfBounds
    );
    assert_eq!(
        op_kind(w.read_into(dev + 8192, &span(&mem, 0, 1))),
        ErrorKind::OutOfBounds
    );
    assert!(
        bytes(&mem, 0, MIB).iter().all(|&b| b == 0xab),
        "a refused read wrote into guest memory"
    );
    // The worker is fine.
    w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
    w.read(dev, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0xab));
    assert!(!w.is_lost() && !w.is_poisoned());
}

#[test]
fn an_earlier_launch_error_is_reported_first_and_the_copy_not_performed() {
    let mem = SharedMemory::create(MIB, MIB, 0).unwrap();
    bytes(&mem, 0, 64).fill(5);
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(64).unwrap();
    let launch = Launch {
        module: 999,
        kernel: 0,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        deadline: Duration::from_secs(1),
    };
    w.launch(&launch).unwrap();
    match w.write_from(dev, &span(&mem, 0, 64)) {
        Err(WorkerError::Op { message, .. }) => {
            assert!(
                message.starts_with("launch #1 of kernel 0 of module 999 failed: "),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    let mut back = vec![0u8; 64];
    w.read(dev, &mut back).unwrap();
    assert_eq!(
        back,
        vec![0u8; 64],
        "the write ran despite the earlier error"
    );
    w.launch(&launch).unwrap();
    assert!(w.read_into(dev, &span(&mem, 0, 64)).is_err());
    assert_eq!(
        bytes(&mem, 0, 64),
        &[5u8; 64][..],
        "the read ran despite the earlier error"
    );
}

#[test]
fn two_workers_share_one_memory() {
    let mem = SharedMemory::create(4 * MIB, 4 * MIB, 0).unwrap();
    let (mut a, mut b) = (emu_worker(512 << 20), emu_worker(512 << 20));
    let data = pattern(MIB, 5);
    bytes(&mem, 0, MIB).copy_from_slice(&data);
    let (da, db) = (a.alloc(MIB as u64).unwrap(), b.alloc(MIB as u64).unwrap());
    a.write_from(da, &span(&mem, 0, MIB)).unwrap();
    b.write_from(db, &span(&mem, 0, MIB)).unwrap();
    // a's device copy comes back through a, b's through b, into different places.
    a.read_into(da, &span(&mem, MIB, MIB)).unwrap();
    b.read_into(db, &span(&mem, 2 * MIB, MIB)).unwrap();
    assert!(bytes(&mem, MIB, MIB) == &data[..] && bytes(&mem, 2 * MIB, MIB) == &data[..]);
    // One worker dying does not disturb the other's use of the memory.
    a.kill();
    bytes(&mem, 0, 4).copy_from_slice(&[1, 2, 3, 4]);
    b.write_from(db, &span(&mem, 0, 4)).unwrap();
    let mut back = [0u8; 4];
    b.read(db, &mut back).unwrap();
    assert_eq!(back, [1, 2, 3, 4]);
}

#[test]
fn reset_detaches_and_the_next_transfer_attaches_again() {
    let mem = SharedMemory::create(MIB, MIB, 0).unwrap();
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(4096).unwrap();
    w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
    assert_eq!(w.attached_memories(), 1);
    w.reset().unwrap();
    assert_eq!(w.attached_memories(), 0);
    bytes(&mem, 0, 4096).fill(0x5a);
    let dev = w.alloc(4096).unwrap();
    w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
    assert_eq!(w.attached_memories(), 1);
    let mut back = vec![0u8; 4096];
    w.read(dev, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5a));
}

#[test]
fn dropped_memories_are_detached_at_the_next_attach() {
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(4096).unwrap();
    for i in 0..5u8 {
        let mem = SharedMemory::create(MIB, MIB, 0).unwrap();
        bytes(&mem, 0, 4096).fill(i);
        w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
        assert_eq!(
            w.attached_memories(),
            1,
            "memory {i}: dead ones were not detached"
        );
        let mut back = vec![0u8; 4096];
        w.read(dev, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == i));
    }
}

#[test]
fn a_worker_killed_mid_transfer_is_lost() {
    let mem = SharedMemory::create(8 * MIB, 8 * MIB, 0).unwrap();
    let mut w = emu_worker(512 << 20);
    let dev = w.alloc(8 * MIB as u64).unwrap();
    w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
    // Stopped, the worker cannot answer; killed while the host waits for the transfer.
    w.signal_for_test(libc::SIGSTOP);
    let pid = w.pid();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        kill9(pid);
    });
    let r = w.write_from(dev, &span(&mem, 0, 8 * MIB));
    killer.join().unwrap();
    assert!(matches!(r, Err(WorkerError::Lost(_))), "{r:?}");
    assert!(matches!(
        w.read_into(dev, &span(&mem, 0, 1)),
        Err(WorkerError::Lost(_))
    ));
    // The memory is still the host's, intact and usable.
    bytes(&mem, 0, 8 * MIB).fill(1);
}

#[test]
fn past_the_size_is_inaccessible() {
    let mut mem = SharedMemory::create(MIB, 4 * MIB, 64 * 1024).unwrap();
    let base = mem.as_ptr() as usize;
    let perms = |at: usize| -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let mut f = line.split_whitespace();
            let range = f.next().unwrap();
            let p = f.next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).unwrap(),
                usize::from_str_radix(hi, 16).unwrap(),
            );
            if (lo..hi).contains(&at) {
                return p.to_string();
            }
        }
        panic!("{at:#x} is not mapped at all")
    };
    assert_eq!(perms(base), "rw-s");
    assert_eq!(perms(base + MIB - 1), "rw-s");
    assert_eq!(perms(base + MIB), "---p", "room to grow must fault");
    assert_eq!(perms(base + 4 * MIB), "---p", "the guard must fault");
    assert_eq!(perms(base + 4 * MIB + 64 * 1024 - 1), "---p");
    mem.grow_to(2 * MIB).unwrap();
    assert_eq!(perms(base + 2 * MIB - 1), "rw-s");
    assert_eq!(perms(base + 2 * MIB), "---p");
}

#[test]
fn a_worker_cannot_shrink_the_memory() {
    // The worker gets the memfd; a shrink would turn guest accesses into SIGBUS in the host.
    let mem = SharedMemory::create(MIB, MIB, 0).unwrap();
    let fd = format!("/proc/self/fd/{}", find_memfd(&mem));
    let f = std::fs::OpenOptions::new().write(true).open(fd).unwrap();
    assert!(f.set_len(0).is_err(), "the memfd could be truncated");
    assert!(f.set_len(2 * MIB as u64).is_ok(), "growing is allowed");
}

/// The fd number of `mem`'s memfd, found through /proc (the API does not expose it).
fn find_memfd(mem: &SharedMemory) -> i32 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let start = format!("{:x}-", mem.as_ptr() as usize);
    let line = maps
        .lines()
        .find(|l| l.starts_with(&start))
        .expect("mapping");
    let inode = line.split_whitespace().nth(4).unwrap().to_string();
    for e in std::fs::read_dir("/proc/self/fd").unwrap() {
        let e = e.unwrap();
        let target = std::fs::read_link(e.path()).unwrap_or_default();
        if target.to_string_lossy().contains("tasklet-guest-memory") {
            use std::os::unix::fs::MetadataExt;
            if std::fs::metadata(e.path()).is_ok_and(|m| m.ino().to_string() == inode) {
                return e.file_name().to_string_lossy().parse().unwrap();
            }
        }
    }
    panic!("memfd not found")
}

#[test]
fn growth_zeroes_what_a_worker_planted_past_the_size() {
    // A worker holds the memfd and may extend it and write past the host's size; the guest must
    // still see zeros when its memory grows there.
    let mut mem = SharedMemory::create(MIB, 4 * MIB, 0).unwrap();
    let fd = format!("/proc/self/fd/{}", find_memfd(&mem));
    let f = std::fs::OpenOptions::new().write(true).open(fd).unwrap();
    f.set_len(4 * MIB as u64).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[0xee; 4096], 2 * MIB as u64).unwrap();
    mem.grow_to(3 * MIB).unwrap();
    assert!(
        bytes(&mem, MIB, 2 * MIB).iter().all(|&b| b == 0),
        "planted bytes showed through"
    );
}
