//! The worker's end: what it takes and when, what it tells the host through `tail`, and a ring the
//! host could not have written reported, not misread.

use std::thread;

use super::*;
use crate::contract::channel::test_support::*;
use crate::contract::channel::DEFAULT_DATA_SIZE;

#[test]
fn only_published_posted_frames_are_taken_without_waiting() {
    let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
    let mut buf = Vec::new();
    assert!(!w.take_ready_posted(&mut buf), "an empty ring");
    for f in [&b"a"[..], b"bb", b"ccc"] {
        h.post(f, soon(), &mut || None).unwrap();
    }
    h.send(b"call", soon(), &mut || None).unwrap();
    assert_eq!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Posted
    );
    assert_eq!(buf, b"a");
    assert!(w.behind(), "it was there before the worker looked");
    assert!(w.take_ready_posted(&mut buf));
    assert_eq!(buf, b"bb");
    assert!(w.take_ready_posted(&mut buf));
    assert_eq!(buf, b"ccc");
    // The call stays for `wait_request`.
    assert!(!w.take_ready_posted(&mut buf));
    assert_eq!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Call
    );
    assert_eq!(buf, b"call");
    // A record the worker had to wait for: it was caught up.
    let poster = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        h.post(b"late", soon(), &mut || None).unwrap();
        h
    });
    assert_eq!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Posted
    );
    assert_eq!(buf, b"late");
    assert!(!w.behind());
    drop(poster.join().unwrap());
}

#[test]
fn frame_bytes_that_look_like_a_later_laps_stamps_are_never_taken_for_a_record() {
    // Every 16-byte chunk of every frame carries, where a header's stamp would sit, the stamp
    // a record at that spot one lap later would have. Batches of varied sizes move the point
    // where the worker catches up with the host all over the ring, lap after lap: each time,
    // nothing past what was sent may look published.
    let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
    let mut buf = Vec::new();
    let mut sent = 0usize;
    let mut i = 0usize;
    while sent < 4 * RING {
        for _ in 0..1 + i % 3 {
            let len = 16 * (50 + (i * 37) % 90);
            let pos = h.mark() as usize % RING;
            let at = if record_size(len) > RING - pos {
                h.mark().wrapping_add((RING - pos) as u32)
            } else {
                h.mark()
            };
            let mut frame = vec![0u8; len];
            for (k, chunk) in frame.chunks_exact_mut(16).enumerate() {
                let future = at.wrapping_add((REC_HEADER + 16 * k + RING) as u32);
                chunk[12..16].copy_from_slice(&stamp(future).to_le_bytes());
                chunk[0..4].copy_from_slice(&(i as u32).to_le_bytes());
            }
            h.post(&frame, soon(), &mut || None).unwrap();
            assert_eq!(
                w.wait_request(&mut buf, &mut || true, &mut || {}),
                Incoming::Posted
            );
            assert_eq!(buf, frame, "frame {i}");
            sent += record_size(len);
            i += 1;
        }
        w.publish_served(w.read);
        assert!(
            !w.published(),
            "a stale stamp at ring position {} passed for a record",
            w.read as usize % RING
        );
    }
}

#[test]
fn tail_covers_the_frames_before_a_call_while_it_is_performed_and_the_call_once_answered() {
    let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
    let mut buf = Vec::new();
    for i in 0..10 {
        h.post(&numbered(i, 100), soon(), &mut || None).unwrap();
    }
    let mark = h.mark();
    let seq = h.send(b"call", soon(), &mut || None).unwrap();
    for _ in 0..10 {
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || {}),
            Incoming::Posted
        );
    }
    // Posted frames served, not yet published (lazily, while frames keep coming).
    assert!(!h.served_past(mark));
    assert_eq!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Call
    );
    assert!(
        h.served_past(mark),
        "the frames before a call are published before it is performed"
    );
    assert!(
        !h.all_served(),
        "a call is not served before it is answered"
    );
    w.respond(b"done").unwrap();
    let mut out = Vec::new();
    h.wait(seq, soon(), &mut || None, &mut out).unwrap();
    assert_eq!(out, b"done");
    assert!(h.all_served());
}

#[test]
fn idle_hook_runs_when_the_ring_empties() {
    let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
    for i in 0..5u32 {
        h.post(&i.to_le_bytes(), soon(), &mut || None).unwrap();
    }
    let mut buf = Vec::new();
    let mut idles = 0;
    for _ in 0..5 {
        assert_eq!(
            w.wait_request(&mut buf, &mut || true, &mut || idles += 1),
            Incoming::Posted
        );
    }
    assert_eq!(idles, 0, "frames were waiting: no idle");
    let closer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(30));
        h.close();
        h
    });
    assert_eq!(
        w.wait_request(&mut buf, &mut || true, &mut || idles += 1),
        Incoming::Closed
    );
    assert_eq!(idles, 1, "once the spin gave up, before sleeping");
    closer.join().unwrap();
}

#[test]
fn a_corrupt_ring_is_reported_by_the_worker_not_misread() {
    // (Written through the worker's own mapping of the region: the same memory the host writes.)
    let (_h, mut w) = pair(DEFAULT_DATA_SIZE);
    let r = &w.region;
    // A record longer than any frame the ring carries.
    r.put_record_header(0, KIND_POSTED, MSG_AREA as u32 + 1, 0);
    r.stamp_at(0).store(stamp(0), Release);
    r.u32_at(OFF_HEAD).store(64, SeqCst);
    let mut buf = Vec::new();
    assert!(matches!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Corrupt(_)
    ));
    // A record that would run past the ring's end.
    let (_h, mut w) = pair(DEFAULT_DATA_SIZE);
    let last = RING - ALIGN;
    w.region
        .put_record_header(last, KIND_POSTED, ALIGN as u32, 0);
    w.region.stamp_at(last).store(stamp(last as u32), Release);
    w.read = last as u32;
    assert!(matches!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Corrupt(_)
    ));
    // An unknown kind.
    let (_h, mut w) = pair(DEFAULT_DATA_SIZE);
    w.region.put_record_header(0, 99, 1, 0);
    w.region.stamp_at(0).store(stamp(0), Release);
    w.region.u32_at(OFF_HEAD).store(32, SeqCst);
    assert!(matches!(
        w.wait_request(&mut buf, &mut || true, &mut || {}),
        Incoming::Corrupt(_)
    ));
}
