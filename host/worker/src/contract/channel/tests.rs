//! Both ends together, over one region, on two threads: frames arrive in order and whole, across
//! wrap-around, wake-ups and the data region.

use std::thread;
use std::time::{Duration, Instant};

use super::test_support::*;
use super::*;

#[test]
fn ping_pong_between_threads() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let t = echo(w);
    for i in 0..10_000u32 {
        let frame = i.to_le_bytes();
        let mut want = frame;
        want.reverse();
        assert_eq!(call(&mut h, &frame), want);
    }
    h.close();
    t.join().unwrap();
}

#[test]
fn many_posted_frames_arrive_in_order_across_wrap_around() {
    posted_frames_arrive_in_order_across_wrap_around(echo);
}

#[test]
fn posted_frames_taken_together_arrive_in_order_across_wrap_around() {
    posted_frames_arrive_in_order_across_wrap_around(echo_taking_ready);
}

/// [`echo`], but after each posted frame it takes every posted frame already published.
fn echo_taking_ready(mut w: WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let mut posted = Vec::new();
        loop {
            match w.wait_request(&mut buf, &mut || true, &mut || {}) {
                Incoming::Call => {
                    assert!(buf.is_empty());
                    w.respond(&(posted.len() as u32).to_le_bytes()).unwrap();
                    // A call is never taken for a posted frame, and the ring is empty now.
                    assert!(!w.take_ready_posted(&mut buf));
                }
                Incoming::Posted => {
                    posted.push(buf.clone());
                    while w.take_ready_posted(&mut buf) {
                        posted.push(buf.clone());
                    }
                }
                Incoming::Closed | Incoming::HostGone => return posted,
                Incoming::Corrupt(why) => panic!("{why}"),
            }
        }
    })
}

fn posted_frames_arrive_in_order_across_wrap_around(
    worker: fn(WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>>,
) {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let t = worker(w);
    // Sizes that do not divide the ring, so records land at every offset and wrap many times.
    let sizes = [1usize, 7, 100, 333, 4000, 60_000];
    let n = 20_000u32;
    for i in 0..n {
        h.post(
            &numbered(i, sizes[i as usize % sizes.len()]),
            soon(),
            &mut || None,
        )
        .unwrap();
    }
    assert_eq!(call(&mut h, &[]), n.to_le_bytes());
    assert!(h.all_served());
    h.close();
    let posted = t.join().unwrap();
    assert_eq!(posted.len(), n as usize);
    for (i, f) in posted.iter().enumerate() {
        assert_eq!(f, &numbered(i as u32, sizes[i % sizes.len()]), "frame {i}");
    }
}

#[test]
fn sleeping_worker_is_woken() {
    let (mut h, w) = pair(DEFAULT_DATA_SIZE);
    let t = echo(w);
    for _ in 0..3 {
        // Long enough for the worker to give up spinning and sleep on the futex.
        thread::sleep(Duration::from_millis(5));
        assert_eq!(call(&mut h, b"abc"), b"cba");
        thread::sleep(Duration::from_millis(5));
        h.post(b"p", soon(), &mut || None).unwrap();
    }
    assert_eq!(call(&mut h, &[]), 3u32.to_le_bytes());
    h.close();
    t.join().unwrap();
}

#[test]
fn oversized_frames_use_the_data_region() {
    let (mut h, w) = pair(MSG_AREA * 4);
    let t = echo(w);
    let big: Vec<u8> = (0..MSG_AREA * 2).map(|i| i as u8).collect();
    let out = call(&mut h, &big);
    assert_eq!(out.len(), big.len());
    assert!(out.iter().rev().eq(big.iter()));
    assert!(matches!(
        h.send(&vec![0; MSG_AREA * 5], soon(), &mut || None),
        Err(SendError::TooLarge(_))
    ));
    // Posted frames never go there (a later call's payload would overwrite them).
    assert!(matches!(
        h.post(&vec![0; MSG_AREA + 1], soon(), &mut || None),
        Err(SendError::TooLarge(_))
    ));
    h.post(&vec![9; MSG_AREA], soon(), &mut || None).unwrap();
    assert_eq!(call(&mut h, &[]), 1u32.to_le_bytes());
    h.close();
    assert_eq!(t.join().unwrap(), vec![vec![9; MSG_AREA]]);
}

#[test]
fn start_handshake() {
    let (h, w) = pair(DEFAULT_DATA_SIZE);
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(10));
        w.fail("no device");
    });
    let r = h.wait_ready(Instant::now() + Duration::from_secs(5), &mut || None);
    assert_eq!(r, Err(WaitError::Failed("no device".into())));
    t.join().unwrap();

    let (h, w) = pair(DEFAULT_DATA_SIZE);
    w.ready();
    assert_eq!(
        h.wait_ready(Instant::now() + Duration::from_secs(5), &mut || None),
        Ok(())
    );
}

#[test]
fn data_region_round_trip_and_bounds() {
    let (mut h, mut w) = pair(MSG_AREA);
    h.write_data(b"hello").unwrap();
    assert_eq!(w.data(5).unwrap(), b"hello");
    w.data_mut(3).unwrap().copy_from_slice(b"abc");
    let mut got = [0u8; 5];
    h.read_data(&mut got).unwrap();
    assert_eq!(&got, b"abclo");
    assert!(w.data(MSG_AREA + 1).is_none());
    assert!(h.write_data(&vec![0; MSG_AREA + 1]).is_err());
}

#[test]
fn gpu_time_travels_with_each_response_and_never_goes_back() {
    let (mut h, mut w) = pair(DEFAULT_DATA_SIZE);
    // The worker reports 100 ns more with each answer, then a smaller figure, then a large one
    // in a frame too large for the inline slot.
    let t = thread::spawn(move || {
        let mut buf = Vec::new();
        for (nanos, len) in [(100, 1), (200, 1), (150, 1), (5_000_000_000, 4096)] {
            assert_eq!(
                w.wait_request(&mut buf, &mut || true, &mut || {}),
                Incoming::Call
            );
            w.set_gpu_time(nanos);
            w.respond(&vec![7u8; len]).unwrap();
        }
    });
    assert_eq!(h.gpu_time(), 0, "nothing reported before the first answer");
    let mut seen = Vec::new();
    for _ in 0..4 {
        call(&mut h, b"x");
        seen.push(h.gpu_time());
    }
    assert_eq!(seen, [100, 200, 200, 5_000_000_000]);
    t.join().unwrap();
}
