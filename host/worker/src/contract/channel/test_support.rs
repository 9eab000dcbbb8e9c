//! What the channel's tests share: a host end and a worker end over one region, and workers on
//! threads that answer in known ways.

use std::thread;
use std::time::{Duration, Instant};

use super::{HostEnd, Incoming, SharedRegion, WorkerEnd};

pub(super) fn pair(data: usize) -> (HostEnd, WorkerEnd) {
    let host = SharedRegion::create(data).unwrap();
    // SAFETY: dup of an fd we own, handed to from_fd as an independent mapping, as a child would.
    let dup = unsafe { libc::dup(host.fd()) };
    let worker = SharedRegion::from_fd(dup).unwrap();
    (HostEnd::new(host), WorkerEnd::new(worker))
}

pub(super) fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// An echo worker: answers each call with the frame reversed; collects posted frames, and
/// answers a call with an empty frame by the number of posted frames seen so far.
pub(super) fn echo(mut w: WorkerEnd) -> thread::JoinHandle<Vec<Vec<u8>>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let mut posted = Vec::new();
        loop {
            match w.wait_request(&mut buf, &mut || true, &mut || {}) {
                Incoming::Call if buf.is_empty() => {
                    w.respond(&(posted.len() as u32).to_le_bytes()).unwrap()
                }
                Incoming::Call => {
                    buf.reverse();
                    w.respond(&buf).unwrap();
                }
                Incoming::Posted => posted.push(buf.clone()),
                Incoming::Closed | Incoming::HostGone => return posted,
                Incoming::Corrupt(why) => panic!("{why}"),
            }
        }
    })
}

pub(super) fn call(h: &mut HostEnd, frame: &[u8]) -> Vec<u8> {
    let seq = h.send(frame, soon(), &mut || None).unwrap();
    let mut out = Vec::new();
    h.wait(seq, soon(), &mut || None, &mut out).unwrap();
    out
}

/// A frame of `len` bytes that says which one it is.
pub(super) fn numbered(i: u32, len: usize) -> Vec<u8> {
    let mut f = i.to_le_bytes().repeat(len.div_ceil(4));
    f.truncate(len.max(4));
    f
}

/// A worker thread taking posted frames, each equal to `expect`, until the channel closes;
/// joins with how many it took.
pub(super) fn count_posted(mut w: WorkerEnd, expect: Vec<u8>) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let mut n = 0;
        while let Incoming::Posted = w.wait_request(&mut buf, &mut || true, &mut || {}) {
            assert_eq!(buf, expect);
            n += 1;
        }
        n
    })
}

/// Waits (a few seconds at most) until the worker says it has served everything sent.
pub(super) fn until_all_served(h: &HostEnd) {
    let deadline = soon();
    while !h.all_served() {
        assert!(Instant::now() < deadline, "the worker never caught up");
        thread::sleep(Duration::from_millis(1));
    }
}
