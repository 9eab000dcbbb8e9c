//! The host's end: room in the ring, deadlines, liveness, signalled answers, and everything a
//! worker can forge refused.

use std::sync::atomic::AtomicU32;
use std::thread;

use super::*;
use crate::contract::channel::test_support::*;
use crate::contract::channel::{Incoming, WorkerEnd, DEFAULT_DATA_SIZE};

#[test]
fn a_full_ring_waits_for_the_worker_and_then_drains() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let frame = [7u8; 1000];
    let per = record_size(frame.len());
    // Nobody serves yet: fill the ring until a post times out.
    let mut posted = 0;
    loop {
        match h.post(
            &frame,
            Instant::now() + Duration::from_millis(20),
            &mut || None,
        ) {
            Ok(()) => posted += 1,
            Err(SendError::Wait(WaitError::Timeout)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(posted, RING / per);
    assert!(!h.all_served());
    // A worker that starts late: the blocked post goes through once it has made room.
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(30));
        count_posted(w, vec![7u8; 1000]).join().unwrap()
    });
    let start = Instant::now();
    h.post(&frame, soon(), &mut || None).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(20));
    until_all_served(&h);
    h.close();
    assert_eq!(t.join().unwrap(), posted + 1);
}

#[test]
fn try_post_posts_while_the_ring_has_room_and_otherwise_posts_nothing() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let frame = [3u8; 1000];
    let mut posted = 0;
    while h.try_post(&frame).unwrap() {
        posted += 1;
    }
    assert_eq!(posted, RING / record_size(frame.len()));
    assert!(
        !h.try_post(&frame).unwrap(),
        "a full ring stays full until the worker serves"
    );
    assert!(matches!(
        h.try_post(&vec![0u8; MSG_AREA + 1]),
        Err(SendError::TooLarge(_))
    ));
    let t = count_posted(w, frame.to_vec());
    until_all_served(&h);
    assert!(h.try_post(&frame).unwrap(), "room again once served");
    until_all_served(&h);
    h.close();
    assert_eq!(t.join().unwrap(), posted + 1);
}

#[test]
fn a_dead_worker_is_noticed_while_waiting_for_room() {
    let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
    while h
        .post(
            &[1; 1000],
            Instant::now() + Duration::from_millis(5),
            &mut || None,
        )
        .is_ok()
    {}
    let start = Instant::now();
    match h.post(&[1; 1000], start + Duration::from_secs(10), &mut || {
        Some("gone".into())
    }) {
        Err(SendError::Wait(WaitError::Dead(why))) => assert_eq!(why, "gone"),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_millis(200));
}

#[test]
fn silent_worker_times_out_and_dead_worker_is_noticed() {
    let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    let start = Instant::now();
    let mut out = Vec::new();
    let r = h.wait(
        seq,
        start + Duration::from_millis(30),
        &mut || None,
        &mut out,
    );
    assert_eq!(r, Err(WaitError::Timeout));
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert!(start.elapsed() < Duration::from_secs(1));

    // (After a timeout the host gives the channel up; a fresh one for the next case.)
    let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
    let seq = h.send(b"y", soon(), &mut || None).unwrap();
    let start = Instant::now();
    let r = h.wait(
        seq,
        start + Duration::from_secs(10),
        &mut || Some("gone".into()),
        &mut out,
    );
    assert_eq!(r, Err(WaitError::Dead("gone".into())));
    assert!(start.elapsed() < Duration::from_millis(100));
}

/// A worker that signals each call's seq through the completion word at once, then answers
/// `late` after `delay` (as a GPU worker does: the device's store lands first).
fn signalling_worker(mut w: WorkerEnd, delay: Duration) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        while let Incoming::Call = w.wait_request(&mut buf, &mut || true, &mut || {}) {
            let seq = w.call_seq().unwrap();
            // SAFETY: the word's address in this mapping, aligned (what a device would store to).
            unsafe { &*(w.completion_word() as *const AtomicU32) }.store(seq, Release);
            thread::sleep(delay);
            buf.reverse();
            w.respond(&buf).unwrap();
        }
    })
}

#[test]
fn a_signalled_sync_ends_before_its_response_which_is_then_skipped() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    // The worker answers 1 s after it signals: a wait that the signal ends comes back well
    // before that, even on a loaded machine.
    let worker = signalling_worker(w, Duration::from_secs(1));
    let mut out = vec![7u8];
    let t = Instant::now();
    let seq = h.send(b"sync", soon(), &mut || None).unwrap();
    assert_eq!(
        h.wait_signalled(seq, soon(), &mut || None, &mut out)
            .unwrap(),
        Answer::Signalled
    );
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}: the signal, not the response, ended it",
        t.elapsed()
    );
    assert_eq!(out, [7], "a signalled answer has no frame");
    // The next call's wait starts while the sync's response is still to come: it skips it.
    assert_eq!(call(&mut h, b"abc"), b"cba");
    assert!(
        t.elapsed() >= Duration::from_secs(2),
        "both responses were waited for in turn"
    );
    // Signalled twice in a row, then a plain wait, which ignores the word and takes the frame.
    for _ in 0..2 {
        let seq = h.send(b"s", soon(), &mut || None).unwrap();
        assert_eq!(
            h.wait_signalled(seq, soon(), &mut || None, &mut out)
                .unwrap(),
            Answer::Signalled
        );
    }
    let seq = h.send(b"xy", soon(), &mut || None).unwrap();
    h.wait(seq, soon(), &mut || None, &mut out).unwrap();
    assert_eq!(out, b"yx");
    h.close();
    worker.join().unwrap();
}

#[test]
fn a_response_from_before_the_last_answer_waited_for_is_refused() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let worker = echo(w);
    assert_eq!(call(&mut h, b"ab"), b"ba");
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    h.wait(seq, soon(), &mut || None, &mut Vec::new()).unwrap();
    h.close();
    worker.join().unwrap();
    // Answered up to `seq`: a response slot showing an older seq is a forgery.
    h.region
        .u32_at(OFF_RESP_SEQ)
        .store(seq.wrapping_sub(1), SeqCst);
    h.seq = seq.wrapping_add(1);
    let late = Instant::now() + Duration::from_millis(200);
    assert!(matches!(
        h.wait(h.seq, late, &mut || None, &mut Vec::new()),
        Err(WaitError::Protocol(_))
    ));
}

#[test]
fn forged_response_descriptors_are_refused() {
    // (Forged through the host's own mapping of the region: the same memory the worker writes.)
    let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
    let mut out = Vec::new();
    // A response seq from nowhere.
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    h.region
        .u32_at(OFF_RESP_SEQ)
        .store(seq.wrapping_add(5), SeqCst);
    assert!(matches!(
        h.wait(
            seq,
            Instant::now() + Duration::from_secs(1),
            &mut || None,
            &mut out
        ),
        Err(WaitError::Protocol(_))
    ));
    // A frame length past its area.
    h.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    h.region.u32_at(OFF_RESP_LOC).store(LOC_MSG, Relaxed);
    h.region.u32_at(OFF_RESP_LEN).store(u32::MAX, Relaxed);
    h.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
    assert!(matches!(
        h.wait(
            seq,
            Instant::now() + Duration::from_secs(1),
            &mut || None,
            &mut out
        ),
        Err(WaitError::Protocol(_))
    ));
    // An inline frame longer than the inline area.
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    h.region.u32_at(OFF_RESP_LOC).store(LOC_INLINE, Relaxed);
    h.region
        .u32_at(OFF_RESP_LEN)
        .store(RESP_INLINE as u32 + 1, Relaxed);
    h.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
    assert!(matches!(
        h.wait(
            seq,
            Instant::now() + Duration::from_secs(1),
            &mut || None,
            &mut out
        ),
        Err(WaitError::Protocol(_))
    ));
    // An unknown location.
    let seq = h.send(b"x", soon(), &mut || None).unwrap();
    h.region.u32_at(OFF_RESP_LOC).store(7, Relaxed);
    h.region.u32_at(OFF_RESP_LEN).store(1, Relaxed);
    h.region.u32_at(OFF_RESP_SEQ).store(seq, SeqCst);
    assert!(matches!(
        h.wait(
            seq,
            Instant::now() + Duration::from_secs(1),
            &mut || None,
            &mut out
        ),
        Err(WaitError::Protocol(_))
    ));
}

#[test]
fn garbage_ring_counters_from_the_worker_are_refused() {
    // (Forged through the host's own mapping of the region: the same memory the worker writes.)
    // A tail the host never sent up to (ahead of head, or far behind it): a protocol
    // violation as soon as the host looks, never an out-of-bounds write or a panic.
    for forged in [1u32, 17, RING as u32 + 16, u32::MAX, u32::MAX / 2] {
        let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
        h.post(b"a", soon(), &mut || None).unwrap();
        h.region
            .u32_at(OFF_TAIL)
            .store(h.head.wrapping_add(forged), SeqCst);
        let mut last = Ok(());
        // A tail ahead of head by less than a ring's worth reads as "more room"; it must
        // still never let the host write out of bounds, however much it posts.
        for _ in 0..(RING / 1024 + 2) {
            last = h.post(
                &[3; 1000],
                Instant::now() + Duration::from_millis(5),
                &mut || None,
            );
            if last.is_err() {
                break;
            }
        }
        match last {
            Err(SendError::Wait(WaitError::Protocol(_) | WaitError::Timeout)) => {}
            other => panic!("tail head+{forged}: {other:?}"),
        }
    }
    // Garbage everywhere else the worker may write: head/tail-adjacent words, response words.
    let (mut h, _w) = pair(DEFAULT_DATA_SIZE);
    for off in [
        OFF_TAIL,
        OFF_HOST_WANTS_SPACE,
        OFF_RESP_LOC,
        OFF_RESP_LEN,
        OFF_HOST_SLEEPING,
    ] {
        h.region.u32_at(off).store(0xdead_beef, SeqCst);
    }
    // (The host reads `tail` only when its last reading shows too little room.)
    let refused = (0..RING / 1000 + 2)
        .map(|_| {
            h.post(
                &[1; 1000],
                Instant::now() + Duration::from_millis(5),
                &mut || None,
            )
        })
        .find(|r| r.is_err());
    assert!(
        matches!(refused, Some(Err(SendError::Wait(WaitError::Protocol(_))))),
        "{refused:?}"
    );
}
