//! One worker process through the real spawn path, with the device-less null backend: these
//! tests exercise the supervisor and transport, not a device.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_worker::contract::channel::{HostEnd, SharedRegion, DEFAULT_DATA_SIZE};
use tasklet_worker::contract::codec::{decode_response, encode_request};
use tasklet_worker::contract::{Request, Response};
use tasklet_worker::{BackendKind, ErrorKind, Worker, WorkerCommand, WorkerError};

#[test]
fn spawn_then_ping_and_info() {
    let mut w = null_worker(Duration::from_secs(5));
    assert!(w.pid() > 0);
    assert!(pid_exists(w.pid()));
    for _ in 0..1000 {
        w.ping().unwrap();
    }
    let info = w.info().unwrap();
    assert_eq!(info.backend, "null");
    // Unsupported ops are typed errors that leave the worker healthy.
    match w.alloc(16) {
        Err(WorkerError::Op {
            kind: ErrorKind::Unsupported,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    w.ping().unwrap();
    assert!(!w.is_lost() && !w.is_poisoned());
}

#[test]
fn killed_from_outside_is_lost_quickly() {
    let mut w = null_worker(Duration::from_secs(30));
    w.ping().unwrap();
    kill9(w.pid());
    let t = Instant::now();
    match w.ping() {
        Err(WorkerError::Lost(m)) => assert!(m.contains("signal 9"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "noticed after {:?}",
        t.elapsed()
    );
    assert!(w.is_lost());
    // Every later op fails at once.
    let t = Instant::now();
    assert!(matches!(w.info(), Err(WorkerError::Lost(_))));
    assert!(matches!(
        w.write(0x100, &[1, 2, 3]),
        Err(WorkerError::Lost(_))
    ));
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert!(!pid_exists(w.pid()), "reaped");
}

#[test]
fn hung_worker_is_lost_after_op_timeout_and_killed() {
    let timeout = Duration::from_millis(300);
    let mut w = null_worker(timeout);
    w.ping().unwrap();
    w.signal_for_test(libc::SIGSTOP);
    let t = Instant::now();
    match w.ping() {
        Err(WorkerError::Lost(m)) => assert!(m.contains("no answer"), "{m}"),
        other => panic!("{other:?}"),
    }
    let took = t.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_millis(500),
        "{took:?}"
    );
    assert!(!pid_exists(w.pid()), "a hung worker is killed and reaped");
}

#[test]
fn drop_and_kill_end_the_process() {
    let w = null_worker(Duration::from_secs(5));
    let pid = w.pid();
    drop(w);
    assert!(!pid_exists(pid));

    let mut w = null_worker(Duration::from_secs(5));
    let pid = w.pid();
    w.kill();
    assert!(!pid_exists(pid));
    assert!(w.is_lost());
    assert!(matches!(w.ping(), Err(WorkerError::Lost(_))));
}

#[test]
fn spawn_failures_are_typed() {
    let bad = WorkerCommand {
        program: "/nonexistent/tasklet".into(),
        args: vec![],
    };
    match Worker::spawn(&bad, BackendKind::Emu, 1 << 20, Duration::from_secs(1)) {
        Err(WorkerError::Spawn(m)) => assert!(m.contains("/nonexistent/tasklet"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A worker that cannot open its backend says why (where there is no CUDA driver to open).
    let cmd = command(false);
    match Worker::spawn(&cmd, BackendKind::Cuda, 1 << 20, Duration::from_secs(1)) {
        Err(WorkerError::Spawn(m)) => assert!(m.contains("cuda"), "{m}"),
        Ok(mut w) => {
            eprintln!("a CUDA device is usable here: the cuda worker started, nothing to refuse");
            w.kill();
        }
        other => panic!("{other:?}"),
    }
    // A program that is not a worker at all exits during start.
    let not_worker = WorkerCommand {
        program: "/bin/true".into(),
        args: vec![],
    };
    match Worker::spawn(
        &not_worker,
        BackendKind::Emu,
        1 << 20,
        Duration::from_secs(1),
    ) {
        Err(WorkerError::Spawn(m)) => assert!(m.contains("before it was ready"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn worker_can_move_between_threads() {
    let mut w = null_worker(Duration::from_secs(5));
    w.ping().unwrap();
    let mut w = std::thread::spawn(move || {
        w.ping().unwrap();
        w
    })
    .join()
    .unwrap();
    w.ping().unwrap();
}

#[test]
fn worker_dies_with_the_thread_that_spawned_it() {
    // PR_SET_PDEATHSIG: the parent is the spawning *thread*. The pool forks from one long-lived
    // thread for this reason; here the spawning thread ends, and its worker goes with it.
    let w = std::thread::spawn(|| null_worker(Duration::from_secs(5)))
        .join()
        .unwrap();
    let pid = w.pid();
    // The process is killed but (being our child) stays a zombie until reaped; a ping reaps it.
    let mut w = w;
    assert!(eventually(Duration::from_secs(2), || w.ping().is_err()));
    assert!(w.is_lost());
    assert!(!pid_exists(pid));
}

/// Spawns the worker binary by hand on a region we hold, to speak the transport directly.
fn raw_worker() -> (HostEnd, std::process::Child) {
    let region = SharedRegion::create(DEFAULT_DATA_SIZE).unwrap();
    let fd = region.fd();
    // Inheritable for this one child only; the test process spawns nothing else meanwhile that matters.
    let dup = unsafe { libc::dup(fd) };
    assert!(dup >= 0);
    let child = Command::new(env!("CARGO_BIN_EXE_tasklet-worker"))
        .args(["--shm-fd", &dup.to_string(), "--null-backend"])
        .spawn()
        .unwrap();
    unsafe { libc::close(dup) };
    let host = HostEnd::new(region);
    host.wait_ready(Instant::now() + Duration::from_secs(10), &mut || None)
        .unwrap();
    (host, child)
}

#[test]
fn worker_answers_malformed_requests_with_errors_and_keeps_serving() {
    let (mut h, mut child) = raw_worker();
    let mut out = Vec::new();
    let deadline = || Instant::now() + Duration::from_secs(5);
    for garbage in [
        &[][..],
        &[0xff; 3][..],
        &[200, 0, 0, 0, 0, 0, 0, 0, 0][..],
        &[1; 40][..],
    ] {
        let seq = h.send(garbage, deadline(), &mut || None).unwrap();
        h.wait(seq, deadline(), &mut || None, &mut out).unwrap();
        match decode_response(&out).unwrap().1 {
            Response::Error {
                kind: ErrorKind::InvalidArgument,
                message,
            } => assert!(message.contains("malformed"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    // A write whose length claims more than the data region.
    let mut frame = Vec::new();
    encode_request(
        7,
        &Request::Write {
            addr: 0,
            len: u64::MAX,
            after: None,
        },
        &mut frame,
    );
    let seq = h.send(&frame, deadline(), &mut || None).unwrap();
    h.wait(seq, deadline(), &mut || None, &mut out).unwrap();
    assert!(matches!(
        decode_response(&out).unwrap(),
        (
            7,
            Response::Error {
                kind: ErrorKind::InvalidArgument,
                ..
            }
        )
    ));
    // Still alive and well.
    frame.clear();
    encode_request(8, &Request::Ping, &mut frame);
    let seq = h.send(&frame, deadline(), &mut || None).unwrap();
    h.wait(seq, deadline(), &mut || None, &mut out).unwrap();
    assert_eq!(decode_response(&out).unwrap(), (8, Response::Ok));
    // Closing the channel ends the worker cleanly.
    h.close();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn worker_exits_when_its_host_pid_is_not_its_parent() {
    let region = SharedRegion::create(DEFAULT_DATA_SIZE).unwrap();
    let dup = unsafe { libc::dup(region.fd()) };
    let status = Command::new(env!("CARGO_BIN_EXE_tasklet-worker"))
        .args([
            "--shm-fd",
            &dup.to_string(),
            "--null-backend",
            "--host-pid",
            "1",
        ])
        .status()
        .unwrap();
    unsafe { libc::close(dup) };
    assert!(status.success());
    let status = Command::new(env!("CARGO_BIN_EXE_tasklet-worker"))
        .arg("--bogus")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
}

fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = s.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields after the name start at field 3 (state); utime and stime are fields 14 and 15.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn idle_worker_sleeps_instead_of_spinning() {
    let mut w = null_worker(Duration::from_secs(5));
    for _ in 0..1000 {
        w.ping().unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    let before = cpu_ticks(w.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(w.pid()) - before;
    // A clock tick is 10 ms; a spinning worker would use ~100 in this second.
    assert!(used <= 2, "idle worker used {used} ticks in 1 s");
    w.ping().unwrap();
}

#[test]
fn cuda_backend_starts_or_says_clearly_why_not() {
    match tasklet_worker::probe_cuda(&command(false)) {
        Ok(info) => {
            // A GPU machine: the worker reports the device.
            assert_eq!(info.backend, "cuda");
            assert!(
                info.device_memory > 0 && info.compute_capability.0 >= 5,
                "{info:?}"
            );
            assert!(info.uuid.starts_with("GPU-"), "{info:?}");
        }
        Err(why) => assert!(why.contains("CUDA") || why.contains("cuda"), "{why}"),
    }
    // Without a driver the message is exactly the documented one.
    // SAFETY: only checks whether the library loads.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        assert_eq!(
            tasklet_worker::probe_cuda(&command(false)).unwrap_err(),
            tasklet_worker::worker::backend::cuda::NO_DRIVER
        );
    }
}

#[test]
fn inventory_mode_prints_the_inventory_or_why_not() {
    match tasklet_worker::nvml::inventory_via_worker(&command(false), Duration::from_secs(20)) {
        Ok(inv) => assert!(!inv.driver_version.is_empty(), "{inv:?}"),
        Err(why) => assert!(why.contains("NVML"), "{why}"),
    }
}
