//! The cuda backend's own logic — driver loading through cudarc, device and context setup, zeroed
//! allocations, bounds, the JIT's error log, argument blocks, asynchronous launches, deadlines at
//! sync and by the watchdog, fault poisoning, the module cache — against a fake `libcuda`
//! (tests/fake_cuda/libcuda.c, built here with `cc`), so it runs on machines without a GPU. What
//! it cannot show is the real driver's behaviour: tests/tests/gpu.rs does that on a GPU.
//!
//! Without a C compiler each test prints "skipped: no C compiler for the fake libcuda" and returns.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_worker::{
    BackendKind, ErrorKind, Launch, LoadedModule, Pool, PoolConfig, Worker, WorkerCommand,
    WorkerError,
};

const IOTA_PTX: &str = include_str!("../../../../kernels/iota.ptx");
const FAULTS_PTX: &str = include_str!("../../../../kernels/faults.ptx");

/// This test process's folder for the fake driver and the files its workers write (counts, JIT
/// logs): under cargo's scratch folder for tests, not the machine's /tmp.
fn scratch_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{}", std::process::id()))
}

/// Builds the fake driver once per test process; None (and a skip line) without `cc`.
fn fake_driver_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch_dir();
        std::fs::create_dir_all(&dir).ok()?;
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_cuda/libcuda.c");
        let lib = dir.join("libcuda.so.1");
        let built = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(src)
            .status();
        match built {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("building the fake libcuda failed: {s}"),
            Err(_) => return None,
        }
        let _ = std::os::unix::fs::symlink(&lib, dir.join("libcuda.so"));
        Some(dir)
    })
    .clone()
}

/// `env LD_LIBRARY_PATH=<fake> tasklet-worker`: a worker that loads the fake driver.
pub(super) fn fake_command() -> Option<WorkerCommand> {
    let Some(dir) = fake_driver_dir() else {
        eprintln!("skipped: no C compiler for the fake libcuda");
        return None;
    };
    Some(WorkerCommand {
        program: "env".into(),
        args: vec![
            format!("LD_LIBRARY_PATH={}", dir.display()),
            env!("CARGO_BIN_EXE_tasklet-worker").into(),
        ],
    })
}

/// A worker on the fake driver that reports its launch and event-record counts to a file;
/// `env` goes into the worker's environment.
pub(super) fn counting_worker(env: &[&str]) -> Option<(Worker, PathBuf)> {
    let mut cmd = fake_command()?;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let file = scratch_dir().join(format!(
        "counts-{}",
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    cmd.args
        .insert(0, format!("FAKE_CUDA_COUNTS={}", file.display()));
    for (i, e) in env.iter().enumerate() {
        cmd.args.insert(1 + i, (*e).into());
    }
    let w = Worker::spawn(&cmd, BackendKind::Cuda, u64::MAX, Duration::from_secs(10))
        .expect("a worker on the fake driver");
    Some((w, file))
}

/// What the fake driver has counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Kernels run, one by one or as graph nodes.
    launches: u64,
    /// Events recorded.
    records: u64,
    /// Sync signals stored (`cuStreamWriteValue32`).
    signals: u64,
    /// Graph launches.
    graphs: u64,
    /// Kernel nodes of instantiated graphs updated.
    updates: u64,
    /// Records of timed events (the clock and end events of GPU-time segments the device times).
    timed: u64,
    /// Records of timed events on the worker's own stream (where they would delay its kernels).
    timed_on_work_stream: u64,
    /// Waits for the worker's stream (`cuStreamSynchronize`).
    pub(super) work_syncs: u64,
    /// Device-side waits of one stream for an event (`cuStreamWaitEvent`).
    event_waits: u64,
}

pub(super) fn counts(file: &PathBuf) -> Counts {
    let s = std::fs::read_to_string(file).unwrap_or_default();
    let words: Vec<&str> = s.split_whitespace().collect();
    match words.as_slice() {
        ["launches", l, "records", r, "signals", s, "graphs", g, "updates", u, "timed", t, "timed-first", tf, "syncs", ws, "waits", ew] => {
            Counts {
                launches: l.parse().unwrap(),
                records: r.parse().unwrap(),
                signals: s.parse().unwrap(),
                graphs: g.parse().unwrap(),
                updates: u.parse().unwrap(),
                timed: t.parse().unwrap(),
                timed_on_work_stream: tf.parse().unwrap(),
                work_syncs: ws.parse().unwrap(),
                event_waits: ew.parse().unwrap(),
            }
        }
        _ => Counts::default(),
    }
}

/// `b - a`, field by field.
pub(super) fn since(a: Counts, b: Counts) -> Counts {
    Counts {
        launches: b.launches - a.launches,
        records: b.records - a.records,
        signals: b.signals - a.signals,
        graphs: b.graphs - a.graphs,
        updates: b.updates - a.updates,
        timed: b.timed - a.timed,
        timed_on_work_stream: b.timed_on_work_stream - a.timed_on_work_stream,
        work_syncs: b.work_syncs - a.work_syncs,
        event_waits: b.event_waits - a.event_waits,
    }
}

pub(super) fn fake_worker() -> Option<Worker> {
    let cmd = fake_command()?;
    Some(
        Worker::spawn(&cmd, BackendKind::Cuda, u64::MAX, Duration::from_secs(10))
            .expect("a worker on the fake driver"),
    )
}

fn iota_args(out: u64, n: u32) -> Vec<u8> {
    out.to_le_bytes()
        .into_iter()
        .chain(n.to_le_bytes())
        .collect()
}

/// A launch of the kernel named `kernel` of `module`: by its index there, as a host launches
/// (an index past the module's kernels for a name it does not have).
pub(super) fn launch<'a>(
    module: &LoadedModule,
    kernel: &str,
    block: u32,
    args: &'a [u8],
    deadline: Duration,
) -> Launch<'a> {
    Launch {
        module: module.id,
        kernel: kernel_index(module, kernel),
        grid: [1, 1, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
        args,
        deadline,
    }
}

#[test]
fn starts_and_describes_the_device() {
    let Some(mut w) = fake_worker() else { return };
    let i = w.info().unwrap();
    assert_eq!(
        (i.backend.as_str(), i.device.as_str()),
        ("cuda", "Fake GPU")
    );
    assert_eq!(
        (
            i.device_memory,
            i.memory_total,
            i.compute_capability,
            i.driver_version
        ),
        (1 << 30, 1 << 30, (9, 0), 13000)
    );
    // The launch limits, from the driver's device attributes.
    assert_eq!(
        i.launch_limits,
        tasklet_worker::LaunchLimits {
            max_threads_per_block: 1024,
            max_block: [1024, 1024, 64],
            max_grid: [2_147_483_647, 65535, 65535],
            max_shared_per_block: 232_448,
            max_param_bytes: 32_764,
        }
    );
    assert_eq!(i.uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
    assert!(i.pinned_data, "the data region is registered");
    let info = tasklet_worker::probe_cuda(&fake_command().unwrap()).unwrap();
    assert_eq!(info.device, "Fake GPU");
}

#[test]
fn allocations_read_as_zeros_and_copies_are_bounded() {
    let Some(mut w) = fake_worker() else { return };
    let a = w.alloc(4096).unwrap();
    let mut buf = vec![1u8; 4096];
    w.read(a, &mut buf).unwrap();
    assert!(
        buf.iter().all(|&b| b == 0),
        "the fake driver fills new memory with 0xAB; the backend must zero it"
    );
    let pattern: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    w.write(a, &pattern).unwrap();
    // Overlapping copy: memmove semantics.
    w.copy(a + 1, a, 100).unwrap();
    w.read(a, &mut buf).unwrap();
    assert_eq!(buf[0], 0);
    assert_eq!(&buf[1..101], &pattern[..100]);
    let info = w.info().unwrap();
    assert_eq!(
        (info.allocations, info.memory_requested, info.memory_used),
        (1, 4096, 4096)
    );
    assert_eq!(
        op_error(w.read(a + 4000, &mut buf[..200])).0,
        ErrorKind::OutOfBounds
    );
    w.write(a + 8192, &[1])
        .expect("posted: refused at the next call");
    assert_eq!(op_error(w.sync()).0, ErrorKind::OutOfBounds);
    assert_eq!(
        op_error(w.write(a + 8192, &vec![1; 9 << 10])).0,
        ErrorKind::OutOfBounds
    );
    assert_eq!(op_error(w.copy(a, a + 4000, 200)).0, ErrorKind::OutOfBounds);
    assert_eq!(op_error(w.alloc(0)).0, ErrorKind::InvalidArgument);
    assert_eq!(op_error(w.alloc(2 << 30)).0, ErrorKind::OutOfMemory);
    w.free(a).unwrap();
    assert_eq!(op_error(w.free(a)).0, ErrorKind::InvalidArgument);
    w.sync().unwrap();
    w.reset().unwrap();
    let info = w.info().unwrap();
    assert_eq!(
        (info.allocations, info.memory_requested, info.modules),
        (0, 0, 0)
    );
}

#[test]
fn load_errors_carry_the_jit_log_and_the_fix() {
    let Some(mut w) = fake_worker() else { return };
    let bad = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry bad()\n{\n\t.reg .b32 %r<2>;\n\tbogus.instr %r1;\n\tret;\n}\n";
    let (k, m) = op_error(w.load_module(bad));
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(
        m.contains("line 7") && m.contains("JIT log") && m.contains("CUDA_ERROR_INVALID_PTX"),
        "{m}"
    );
    let (k, m) = op_error(w.load_module(&IOTA_PTX.replacen(".version 9.0", ".version 99.0", 1)));
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(
        m.contains("99.0")
            && m.contains("newer than this driver compiles (PTX ISA up to 9.0, as CUDA 13.0)"),
        "{m}"
    );
    let (k, m) = op_error(w.load_module("garbage with a NUL \0 byte"));
    assert_eq!(k, ErrorKind::LoadFailed, "{m}");
    let (k, m) = op_error(w.load_module(&format!("{IOTA_PTX}// a NUL \0 byte\n")));
    assert_eq!(k, ErrorKind::LoadFailed, "{m}");
    assert!(m.contains("NUL byte"), "{m}");
    // Still usable.
    w.load_module(IOTA_PTX).unwrap();
}

/// Posts `l` (which must be accepted) and returns the error the next `sync` reports.
#[test]
fn launches_pass_the_argument_block_and_reuse_cached_modules() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(IOTA_PTX).unwrap();
    assert_eq!(m.kernels[0].name, "iota");
    let out = w.alloc(4 * 128).unwrap();
    let args = iota_args(out, 100);
    w.launch(&launch(&m, "iota", 128, &args, Duration::from_secs(5)))
        .unwrap();
    w.sync().unwrap();
    let mut data = vec![0u8; 4 * 128];
    w.read(out, &mut data).unwrap();
    let vals: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(&vals[..100], &(1..=100).collect::<Vec<u32>>()[..]);
    assert!(vals[100..].iter().all(|&v| v == 0));
    // The same PTX again, asked of the worker (a launch posted since its last answer keeps the
    // host from answering): a new id on the worker's cached module; it outlives the first id.
    w.launch(&launch(&m, "iota", 128, &args, Duration::from_secs(5)))
        .unwrap();
    let again = w.load_module(IOTA_PTX).unwrap();
    assert_ne!(again.id, m.id);
    w.unload_module(m.id).unwrap();
    assert_eq!(
        posted_error(
            &mut w,
            &launch(&m, "iota", 128, &args, Duration::from_secs(5))
        )
        .0,
        ErrorKind::InvalidArgument
    );
    w.launch(&launch(&again, "iota", 128, &args, Duration::from_secs(5)))
        .unwrap();
    // Refused launches leave the worker usable. Launches are posted: the refusal is reported by
    // the next op that waits (here `sync`).
    let (k, msg) = posted_error(
        &mut w,
        &launch(&again, "iota", 2048, &args, Duration::from_secs(5)),
    );
    assert_eq!(k, ErrorKind::LaunchFailed);
    assert!(
        msg.contains("1024 threads") && msg.contains("CUDA_ERROR_INVALID_VALUE"),
        "{msg}"
    );
    assert_eq!(
        posted_error(
            &mut w,
            &launch(&again, "iota", 1, &args[..8], Duration::from_secs(5))
        )
        .0,
        ErrorKind::LaunchFailed
    );
    assert_eq!(
        posted_error(
            &mut w,
            &launch(&again, "nope", 1, &args, Duration::from_secs(5))
        )
        .0,
        ErrorKind::InvalidArgument
    );
    w.sync().unwrap();
    assert!(!w.is_poisoned());
    assert_eq!(w.info().unwrap().modules, 1);
    w.reset().unwrap();
    assert_eq!(w.info().unwrap().modules, 0);
}

#[test]
fn a_burst_taken_together_keeps_each_argument_block_and_stops_at_a_refusal() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(IOTA_PTX).unwrap();
    const SLOTS: usize = 12;
    // Launch k writes 1..=k+1 into slot k of a fresh buffer: every launch needs its own argument
    // block. The worker is stopped while the burst is posted, so it finds the whole burst ready
    // and takes it together. `refuse`: (launch, its block size, its argument bytes).
    let mut burst =
        |refuse: Option<(usize, u32, usize)>| -> (Result<(), WorkerError>, Vec<Vec<u32>>) {
            let out = w.alloc(SLOTS as u64 * 64).unwrap();
            w.signal_for_test(libc::SIGSTOP);
            for k in 0..SLOTS {
                let args = iota_args(out + k as u64 * 64, k as u32 + 1);
                let (block, len) = match refuse {
                    Some((at, block, len)) if at == k => (block, len),
                    _ => (16, args.len()),
                };
                w.launch(&launch(
                    &m,
                    "iota",
                    block,
                    &args[..len],
                    Duration::from_secs(5),
                ))
                .unwrap();
            }
            w.signal_for_test(libc::SIGCONT);
            let synced = w.sync();
            let mut data = vec![0u8; SLOTS * 64];
            w.read(out, &mut data).unwrap();
            let slots = data
                .chunks_exact(64)
                .map(|s| {
                    s.chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect()
                })
                .collect();
            (synced, slots)
        };
    let written = |k: usize, ran: bool| -> Vec<u32> {
        (1..=16)
            .map(|v| if ran && v <= k as u32 + 1 { v } else { 0 })
            .collect()
    };

    let (synced, slots) = burst(None);
    synced.unwrap();
    for (k, v) in slots.iter().enumerate() {
        assert_eq!(*v, written(k, true), "slot {k}");
    }
    // Refused in the middle, by the backend's own check (a short argument block) and by the
    // driver (too many threads per block): the launches before it ran, those behind it were
    // dropped, and the worker stays usable.
    for (refuse, says) in [
        ((5, 16, 8), "8 bytes given"),
        ((7, 2048, 12), "1024 threads"),
    ] {
        let (synced, slots) = burst(Some(refuse));
        let (kind, msg) = op_error(synced);
        assert_eq!(kind, ErrorKind::LaunchFailed);
        assert!(msg.contains(says), "{msg}");
        for (k, v) in slots.iter().enumerate() {
            assert_eq!(
                *v,
                written(k, k < refuse.0),
                "slot {k} of a burst refused at {}",
                refuse.0
            );
        }
    }
    assert!(!w.is_poisoned());
}

#[test]
fn a_fault_is_reported_at_sync_and_poisons_the_worker() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    let args: Vec<u8> = buf
        .to_le_bytes()
        .into_iter()
        .chain((1u64 << 40).to_le_bytes())
        .collect();
    w.launch(&launch(
        &m,
        "write_out_of_bounds",
        1,
        &args,
        Duration::from_secs(5),
    ))
    .unwrap();
    let (k, msg) = op_error(w.sync());
    assert_eq!(k, ErrorKind::KernelFault);
    assert!(
        msg.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && msg.contains("write_out_of_bounds"),
        "{msg}"
    );
    assert!(w.is_poisoned());
    assert_eq!(op_error(w.alloc(16)).0, ErrorKind::KernelFault);
}

#[test]
fn a_kernel_that_faults_is_charged_the_time_it_ran() {
    // The kernel works for 300 ms, then faults: the device can no longer report its segment's
    // end, but it held the lease's work all that time. (Uncounted, a tenant would get a
    // deadline's worth of GPU time free with each lease by faulting at the end.)
    let Some((mut w, file)) = counting_worker(&["FAKE_CUDA_FAULT_AFTER_MS=300"]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    let args: Vec<u8> = buf
        .to_le_bytes()
        .into_iter()
        .chain((1u64 << 40).to_le_bytes())
        .collect();
    w.ping().unwrap();
    let before = w.gpu_time();
    let t = Instant::now();
    w.launch(&launch(
        &m,
        "write_out_of_bounds",
        1,
        &args,
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_eq!(op_error(w.sync()).0, ErrorKind::KernelFault);
    let ran = t.elapsed();
    // The error's answer carries the time, counted up to when the worker saw the fault.
    let charged = w.gpu_time() - before;
    assert!(
        charged >= Duration::from_millis(290) && charged <= ran,
        "{charged:?} charged for a kernel that ran 300 ms, then faulted ({ran:?} from its launch to the answer)"
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_kernel_that_faults_before_its_segment_ends_is_charged_the_time_it_ran() {
    // The kernel faults 100 ms after its launch, while the worker is held up queueing the sync's
    // completion store (300 ms): the segment's end can then not be recorded at all (the driver
    // refuses every call after a fault), but the device held the lease's work until the fault.
    let Some((mut w, file)) = counting_worker(&[
        "FAKE_CUDA_FAULT_AFTER_MS=100",
        "FAKE_CUDA_SIGNAL_STALL_MS=300",
    ]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let buf = w.alloc(64).unwrap();
    let args: Vec<u8> = buf
        .to_le_bytes()
        .into_iter()
        .chain((1u64 << 40).to_le_bytes())
        .collect();
    w.ping().unwrap();
    let before = w.gpu_time();
    let t = Instant::now();
    w.launch(&launch(
        &m,
        "write_out_of_bounds",
        1,
        &args,
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_eq!(op_error(w.sync()).0, ErrorKind::KernelFault);
    let ran = t.elapsed();
    let charged = w.gpu_time() - before;
    assert!(
        charged >= Duration::from_millis(90) && charged <= ran,
        "{charged:?} charged for a kernel that ran 100 ms, then faulted ({ran:?} from its launch to the answer)"
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_sync_is_seen_through_the_devices_completion_store_before_the_worker_answers() {
    // The fake device's store of the sync's seq lands at once, and the driver call that asked for
    // it then takes 1.5 s to return, so the worker answers the sync that late (long enough that
    // a loaded machine's scheduling cannot blur the two). The kernel's event reads done only
    // 300 ms after its launch: a worker that saw it done before the sync came (the host's thread
    // descheduled between the two, on a loaded machine) would rightly answer the sync itself,
    // with nothing left to signal.
    let Some(mut cmd) = fake_command() else {
        return;
    };
    cmd.args.insert(0, "FAKE_CUDA_SIGNAL_STALL_MS=1500".into());
    cmd.args.insert(0, "FAKE_CUDA_EVENT_LAG_US=300000".into());
    let mut w = Worker::spawn(&cmd, BackendKind::Cuda, u64::MAX, Duration::from_secs(10))
        .expect("a worker on the fake driver");
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(64).unwrap();
    for round in 1..=2u64 {
        w.launch(&launch(
            &m,
            "iota",
            16,
            &iota_args(out, 16),
            Duration::from_secs(5),
        ))
        .unwrap();
        let t = Instant::now();
        w.sync().unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(750),
            "{:?}: answered by the worker, not the device",
            t.elapsed()
        );
        assert_eq!(w.signalled_syncs(), round);
        // The next op queues behind the worker's own late answer to the sync, which is skipped.
        let mut buf = vec![0u8; 64];
        let t = Instant::now();
        w.read(out, &mut buf).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(50),
            "the read waited for the worker to finish the sync"
        );
        let got: Vec<u32> = buf
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, (1..=16).collect::<Vec<u32>>());
    }
    // With no kernel queued the worker answers by itself.
    w.sync().unwrap();
    assert_eq!(w.signalled_syncs(), 2);
    // A faulting kernel's sync is never signalled: its error is the worker's answer.
    let f = w.load_module(FAULTS_PTX).unwrap();
    let args: Vec<u8> = out
        .to_le_bytes()
        .into_iter()
        .chain((1u64 << 40).to_le_bytes())
        .collect();
    w.launch(&launch(
        &f,
        "write_out_of_bounds",
        1,
        &args,
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_eq!(op_error(w.sync()).0, ErrorKind::KernelFault);
    assert_eq!(w.signalled_syncs(), 2);
}

#[test]
fn a_runaway_kernel_is_deadline_exceeded_at_sync_and_launch_is_asynchronous() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    let t = Instant::now();
    w.launch(&launch(
        &m,
        "spin_forever",
        32,
        &args,
        Duration::from_millis(300),
    ))
    .unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "launch waited {:?}",
        t.elapsed()
    );
    let (k, msg) = op_error(w.sync());
    let took = t.elapsed();
    assert_eq!(k, ErrorKind::DeadlineExceeded, "{msg}");
    assert!(msg.contains("spin_forever"), "{msg}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(1000),
        "sync answered after {took:?}"
    );
    assert!(w.is_poisoned());
}

#[test]
fn a_runaway_nobody_waits_for_is_ended_by_the_watchdog() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    w.launch(&launch(
        &m,
        "spin_forever",
        32,
        &args,
        Duration::from_millis(200),
    ))
    .unwrap();
    let pid = w.pid();
    // The watchdog ends the process ~250 ms after the deadline.
    std::thread::sleep(Duration::from_millis(800));
    let (k, msg) = op_error(w.ping());
    assert_eq!(k, ErrorKind::DeadlineExceeded, "{msg}");
    assert!(msg.contains("watchdog"), "{msg}");
    assert!(w.is_lost());
    assert!(!pid_exists(pid));
}

#[test]
fn the_watchdog_announces_its_exit_to_the_host_before_it_ends_the_process() {
    // On a GPU the process can take a second or more to go (the driver tears down a context
    // whose kernel still runs): the host must know why before then, to charge the kernel.
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    assert!(!w.deadline_exit_announced());
    w.launch(&launch(
        &m,
        "spin_forever",
        32,
        &args,
        Duration::from_millis(200),
    ))
    .unwrap();
    // The watchdog acts ~250 ms past the deadline.
    assert!(
        eventually(Duration::from_secs(3), || w.deadline_exit_announced()),
        "announced in the channel"
    );
    assert!(w.overran());
}

#[test]
fn a_kernel_still_running_is_unreported_time_and_a_finished_one_is_not() {
    // A lease that ends while its kernel runs gives the worker up, and is charged from where the
    // worker says its device time is in no GPU time reported: a runaway dropped just before its
    // deadline must not run free.
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    // Finished work, waited for or not, leaves nothing unreported.
    w.launch(&launch(&m, "empty", 1, &[], Duration::from_secs(5)))
        .unwrap();
    w.sync().unwrap();
    w.launch(&launch(&m, "empty", 1, &[], Duration::from_secs(5)))
        .unwrap();
    assert!(
        eventually(Duration::from_secs(2), || w.unreported_run().is_none()),
        "a finished launch not waited for is still unreported: {:?}",
        w.unreported_run()
    );
    w.sync().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(w.unreported_run(), None);

    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    let deadline = Duration::from_secs(2);
    let t = Instant::now();
    w.launch(&launch(&m, "spin_forever", 32, &args, deadline))
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let ran = w
        .unreported_run()
        .expect("a running kernel's time is unreported");
    // From when the worker took the launch, which is after `t` (it is posted, not answered):
    // a loaded machine may wake the worker some milliseconds later.
    assert!(
        ran >= Duration::from_millis(250) && ran <= t.elapsed() && ran < deadline,
        "unreported {ran:?} after {:?}",
        t.elapsed()
    );
}

#[test]
fn work_that_finished_unreported_is_in_the_gpu_time_the_host_reads() {
    // A launch never waited for: no answer carries its time, but the worker publishes what it
    // counts, so a lease given up unasked (its holder dropped it) is still charged for it.
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 1024).unwrap();
    assert_eq!(w.gpu_time(), Duration::ZERO);
    w.launch(&launch(
        &m,
        "iota",
        1024,
        &iota_args(out, 1024),
        Duration::from_secs(5),
    ))
    .unwrap();
    assert!(
        eventually(Duration::from_secs(2), || w.gpu_time() > Duration::ZERO),
        "the launch's time never reached the host without an answer"
    );
}

#[test]
fn a_worker_with_kernels_still_queued_is_replaced_not_reset() {
    let Some(command) = fake_command() else {
        return;
    };
    let pool = Pool::start(PoolConfig {
        command,
        backend: BackendKind::Cuda,
        warm: 1,
        max_workers: 2,
        device_memory: u64::MAX,
        op_timeout: Duration::from_secs(5),
        reuse: true,
    })
    .unwrap();
    let mut w = pool.acquire().unwrap();
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    w.launch(&launch(
        &m,
        "spin_forever",
        32,
        &args,
        Duration::from_secs(30),
    ))
    .unwrap();
    assert!(w.has_pending_launches());
    let pid = w.pid();
    let t = Instant::now();
    pool.release(w);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "release waited {:?} for the kernel",
        t.elapsed()
    );
    wait_dead(pid);
    // A healthy one (nothing queued) is reset and reused.
    let mut w = pool.acquire().unwrap();
    let reused = w.pid();
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(64).unwrap();
    w.launch(&launch(
        &m,
        "iota",
        16,
        &iota_args(out, 16),
        Duration::from_secs(5),
    ))
    .unwrap();
    w.sync().unwrap();
    pool.release(w);
    let w = pool.acquire().unwrap();
    assert_eq!(w.pid(), reused);
    pool.release(w);
}

/// Stops the worker once it is asleep waiting for requests, and waits until it is stopped (`kill`
/// returns before the signal is taken), so that it finds everything posted next ready at once
/// when it continues and takes the first launch alone, as one it waited for. Stopped any earlier
/// (the host has its last answer before the worker is back in its wait), it would find the
/// launches there at its first look and take them all together.
fn stop(w: &Worker) {
    let stat = format!("/proc/{}/stat", w.pid());
    // The state of the worker's main thread, its serving thread: the letter after the
    // parenthesised command name.
    let state = || {
        std::fs::read_to_string(&stat).ok().and_then(|s| {
            s.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || state() == Some('S')),
        "the worker did not go to sleep waiting for requests"
    );
    w.signal_for_test(libc::SIGSTOP);
    assert!(
        eventually(Duration::from_secs(5), || matches!(
            state(),
            Some('T' | 't')
        )),
        "the worker did not stop"
    );
}

/// 20 launches of `empty` posted while the worker is stopped, then a sync and a ping (answered
/// only after the worker finished the sync, which may have been seen earlier through the
/// completion word, before the last group's event was recorded): what the driver saw.
fn stopped_burst(w: &mut Worker, file: &PathBuf, module: &LoadedModule) -> Counts {
    let before = counts(file);
    stop(w);
    for _ in 0..20 {
        w.launch(&launch(module, "empty", 1, &[], Duration::from_secs(5)))
            .unwrap();
    }
    w.signal_for_test(libc::SIGCONT);
    w.sync().unwrap();
    w.ping().unwrap();
    since(before, counts(file))
}

#[test]
fn a_burst_of_launches_shares_one_event_per_group() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    w.sync().unwrap();
    // All 20 are queued when the worker continues. It takes the first alone (it was waiting for
    // it), then 16 together, then 3; groups of 8, 8, and 4 closed by the sync (its event goes
    // before the sync's completion word). Each run of launches within one group is one graph
    // launch: [1] [7 | 8 | 1] [3].
    let c = stopped_burst(&mut w, &file, &m);
    assert_eq!(c.launches, 20);
    // Each group records one completion event (untimed). GPU time: a timed clock and end event
    // per segment the device times, none on the worker's stream; the burst is one segment, or
    // a few where it took past `SEGMENT_SPAN` (here the fake driver writes a file per launch),
    // never more than one per group.
    assert_eq!(
        (c.records - c.timed, c.timed_on_work_stream),
        (3, 0),
        "20 launches in groups of {}: {c:?}",
        tasklet_worker::worker::backend::cuda::GROUP_MAX
    );
    assert!(
        c.timed >= 2 && c.timed <= 2 * 3 && c.timed.is_multiple_of(2),
        "{c:?}"
    );
    assert_eq!(c.graphs, 5, "one graph launch per run within a group");
    // The sync is signalled, unless a GPU-time report was due (`REPORT_EVERY`: the worker was
    // stopped a while) and the worker answered it.
    assert!(c.signals <= 1, "one sync: {c:?}");
    // A lone launch is closed when the worker idles (no sync), so the watchdog can see it, and
    // so is its segment.
    let r1 = counts(&file);
    w.launch(&launch(&m, "empty", 1, &[], Duration::from_secs(5)))
        .unwrap();
    assert!(
        eventually(Duration::from_secs(2), || {
            let c = since(r1, counts(&file));
            (c.records, c.timed) == (3, 2)
        }),
        "{:?}",
        since(r1, counts(&file))
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn graph_nodes_are_updated_only_where_a_launch_differs() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(8 * 64).unwrap();
    // Eight launches of iota, launch k into slot k, posted while the worker is stopped: it takes
    // the first alone, then seven together: a chain of one and a chain of seven.
    let run = |w: &mut Worker, n_of: &dyn Fn(usize) -> u32| -> Counts {
        let before = counts(&file);
        stop(w);
        for k in 0..8 {
            let args = iota_args(out + k as u64 * 64, n_of(k));
            w.launch(&launch(&m, "iota", 16, &args, Duration::from_secs(5)))
                .unwrap();
        }
        w.signal_for_test(libc::SIGCONT);
        w.sync().unwrap();
        w.ping().unwrap();
        since(before, counts(&file))
    };
    let first = run(&mut w, &|k| k as u32 + 1);
    assert_eq!(
        (first.launches, first.graphs, first.updates),
        (8, 2, 0),
        "built from its first run: {first:?}"
    );
    let again = run(&mut w, &|k| k as u32 + 1);
    assert_eq!(
        (again.launches, again.graphs, again.updates),
        (8, 2, 0),
        "the same launches again: {again:?}"
    );
    // Slots 2 and 5 now get 16 values: two argument blocks differ, two nodes are updated.
    let changed = run(&mut w, &|k| {
        if k == 2 || k == 5 {
            16
        } else {
            k as u32 + 1
        }
    });
    assert_eq!(
        (changed.launches, changed.graphs, changed.updates),
        (8, 2, 2),
        "{changed:?}"
    );
    let mut data = vec![0u8; 8 * 64];
    w.read(out, &mut data).unwrap();
    for (k, slot) in data.chunks_exact(64).enumerate() {
        let got: Vec<u32> = slot
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let n = if k == 2 || k == 5 { 16 } else { k as u32 + 1 };
        let want: Vec<u32> = (1..=16).map(|v| if v <= n { v } else { 0 }).collect();
        assert_eq!(got, want, "slot {k}");
    }
    // A reset unloads every module, and first forgets the chains (they hold its functions): the
    // next run builds anew rather than updating nodes of functions that are gone.
    w.reset().unwrap();
    let m2 = w.load_module(FAULTS_PTX).unwrap();
    let c = stopped_burst(&mut w, &file, &m2);
    assert_eq!((c.launches, c.graphs, c.updates), (20, 5, 0), "{c:?}");
    let _ = std::fs::remove_file(file);
}

#[test]
fn with_graphs_turned_off_launches_go_one_by_one() {
    let Some((mut w, file)) = counting_worker(&["TASKLET_CUDA_GRAPHS=0"]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    w.sync().unwrap();
    let c = stopped_burst(&mut w, &file, &m);
    assert_eq!(
        (c.launches, c.records - c.timed, c.graphs),
        (20, 3, 0),
        "{c:?}"
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_runaway_inside_a_burst_is_caught_within_its_groups_summed_deadline() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(FAULTS_PTX).unwrap();
    let flag = w.alloc(4).unwrap();
    let args = flag.to_le_bytes();
    let d = Duration::from_millis(100);
    w.signal_for_test(libc::SIGSTOP);
    let t = Instant::now();
    for i in 0..7 {
        if i == 3 {
            w.launch(&launch(&m, "spin_forever", 32, &args, d)).unwrap();
        } else {
            w.launch(&launch(&m, "empty", 1, &[], d)).unwrap();
        }
    }
    w.signal_for_test(libc::SIGCONT);
    let (k, msg) = op_error(w.sync());
    let took = t.elapsed();
    assert_eq!(k, ErrorKind::DeadlineExceeded, "{msg}");
    assert!(
        msg.contains("spin_forever") && msg.contains("7 launched together"),
        "{msg}"
    );
    // The group's deadline is the sum of its 7 members' (a legitimate burst gets all of it).
    assert!(
        took >= 7 * d - Duration::from_millis(20) && took < 7 * d + Duration::from_millis(700),
        "{took:?}"
    );
    assert!(w.is_poisoned());
}

mod guest {
    //! Guest memories on the cuda backend: the fake driver refuses host copies that do not lie
    //! inside one registration, and refuses overlapping registrations, as the real one treats the
    //! first as pageable and refuses the second.

    use super::*;
    use tasklet_worker::guest_memory::SharedMemory;

    const MIB: usize = 1 << 20;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
            .collect()
    }

    #[test]
    fn a_transfer_spanning_two_registration_chunks_is_split() {
        let Some(mut w) = fake_worker() else { return };
        let mem = SharedMemory::create(80 * MIB, 80 * MIB, 0).unwrap();
        let (off, n) = (60 * MIB + 3, 10 * MIB);
        let data = pattern(n, 1);
        bytes(&mem, off, n).copy_from_slice(&data);
        let dev = w.alloc(n as u64).unwrap();
        w.write_from(dev, &span(&mem, off, n)).unwrap();
        bytes(&mem, off, n).fill(0);
        w.read_into(dev, &span(&mem, off, n)).unwrap();
        assert!(bytes(&mem, off, n) == &data[..]);
        // Through the data region too (the old path, still pinned).
        let mut back = vec![0u8; n];
        w.read(dev, &mut back).unwrap();
        assert!(back == data);
    }

    #[test]
    fn growth_after_registration_re_registers_the_chunk() {
        let Some(mut w) = fake_worker() else { return };
        let mut mem = SharedMemory::create(MIB, 128 * MIB, 64 * 1024).unwrap();
        let dev = w.alloc(70 * MIB as u64).unwrap();
        bytes(&mem, 0, 4096).fill(7);
        // Registers the first chunk as far as the memory goes now: 1 MiB (the fake driver
        // touches every page it registers, so registering past the memfd's end kills the worker).
        w.write_from(dev, &span(&mem, 0, 4096)).unwrap();
        mem.grow_to(100 * MIB).unwrap();
        let data = pattern(68 * MIB, 9);
        bytes(&mem, 2 * MIB, 68 * MIB).copy_from_slice(&data);
        // Needs the first chunk again, now larger (an overlapping registration is refused, so it
        // must be unregistered first), and part of the second.
        w.write_from(dev, &span(&mem, 2 * MIB, 68 * MIB)).unwrap();
        w.read_into(dev, &span(&mem, 30 * MIB, 68 * MIB)).unwrap();
        assert!(bytes(&mem, 30 * MIB, 68 * MIB) == &data[..]);
        // Growing again past what the second chunk registered.
        mem.grow_to(128 * MIB).unwrap();
        w.read_into(dev, &span(&mem, 100 * MIB, 20 * MIB)).unwrap();
        assert!(bytes(&mem, 100 * MIB, 20 * MIB) == &data[..20 * MIB]);
        assert!(!w.is_lost() && !w.is_poisoned());
    }

    #[test]
    fn reset_unregisters_and_a_later_transfer_registers_again() {
        let Some(mut w) = fake_worker() else { return };
        let mem = SharedMemory::create(4 * MIB, 4 * MIB, 0).unwrap();
        bytes(&mem, 0, 4 * MIB).fill(3);
        for round in 0..3 {
            let dev = w.alloc(4 * MIB as u64).unwrap();
            w.write_from(dev, &span(&mem, 0, 4 * MIB)).unwrap();
            let mut back = vec![0u8; 4 * MIB];
            w.read(dev, &mut back).unwrap();
            assert!(back.iter().all(|&b| b == 3), "round {round}");
            w.reset().unwrap();
            assert_eq!(w.attached_memories(), 0);
        }
        // Dropped memories are detached (and unregistered) when the next one attaches.
        for i in 0..4u8 {
            let m = SharedMemory::create(2 * MIB, 2 * MIB, 0).unwrap();
            bytes(&m, 0, 2 * MIB).fill(i);
            let dev = w.alloc(2 * MIB as u64).unwrap();
            w.write_from(dev, &span(&m, 0, 2 * MIB)).unwrap();
            let mut back = vec![0u8; 16];
            w.read(dev, &mut back).unwrap();
            assert_eq!(back, vec![i; 16]);
            assert_eq!(w.attached_memories(), 1);
        }
    }
}

#[test]
fn gpu_time_is_counted_per_segment_and_not_while_the_device_idles() {
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 4096).unwrap();
    assert_eq!(w.gpu_time(), Duration::ZERO, "nothing launched yet");
    let args = iota_args(out, 1024);
    w.launch(&launch(&m, "iota", 1024, &args, Duration::from_secs(5)))
        .unwrap();
    w.sync().unwrap();
    // A signalled sync carries no time: the next answer does.
    w.ping().unwrap();
    let first = w.gpu_time();
    assert!(first > Duration::ZERO, "{first:?}");
    for _ in 0..3 {
        w.launch(&launch(&m, "iota", 1024, &args, Duration::from_secs(5)))
            .unwrap();
    }
    w.sync().unwrap();
    w.ping().unwrap();
    let second = w.gpu_time();
    assert!(second > first, "{second:?} after {first:?}");
    // Launches with the worker idle between them, then one sync: the idle time is charged to no
    // one (each idle ends a segment), though the device's work is.
    let idle = Duration::from_millis(300);
    for _ in 0..2 {
        w.launch(&launch(&m, "iota", 1024, &args, Duration::from_secs(5)))
            .unwrap();
        std::thread::sleep(idle);
    }
    w.sync().unwrap();
    w.ping().unwrap();
    let third = w.gpu_time();
    assert!(third > second, "{third:?} after {second:?}");
    assert!(
        third - second < idle / 2,
        "{:?} charged for two launches {idle:?} apart",
        third - second
    );
    // The lease's time is all counted by the answer to its reset: none is left for the next.
    w.launch(&launch(&m, "iota", 1024, &args, Duration::from_secs(5)))
        .unwrap();
    w.reset().unwrap();
    assert!(w.gpu_time() > third, "{:?} after {third:?}", w.gpu_time());
}

#[test]
fn a_launch_the_driver_refuses_leaves_no_deadline_behind() {
    // Events read not-ready for 20 ms after they are recorded: a group with no kernel in it
    // would be given only the host's time since the refused launch (microseconds) and be
    // reported past its deadline by the next wait.
    let Some((mut w, file)) = counting_worker(&["FAKE_CUDA_EVENT_LAG_US=20000"]) else {
        return;
    };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 64).unwrap();
    let args = iota_args(out, 16);
    let before = counts(&file);
    let (k, msg) = posted_error(
        &mut w,
        &launch(&m, "iota", 2048, &args, Duration::from_secs(5)),
    );
    assert_eq!(k, ErrorKind::LaunchFailed, "{msg}");
    // Every op that waits for the kernels still works, at once.
    let t = Instant::now();
    let more = w.alloc(4096).unwrap();
    w.free(more).unwrap();
    w.sync().unwrap();
    // (Bounded well below the 5 s deadline that a wait for the refused kernel would take, and
    // loosely enough for a loaded CI machine.)
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Nothing reached the device, so nothing was waited for or timed.
    let c = since(before, counts(&file));
    assert_eq!((c.launches, c.records), (0, 0), "{c:?}");
    // A kernel that ran is waited for, however late its event reads done, within its deadline.
    w.launch(&launch(&m, "iota", 16, &args, Duration::from_secs(5)))
        .unwrap();
    w.sync().unwrap();
    let mut data = vec![0u8; 64];
    w.read(out, &mut data).unwrap();
    assert_eq!(
        u32::from_le_bytes([data[60], data[61], data[62], data[63]]),
        16
    );
    assert!(!w.is_poisoned());
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_tenant_that_only_launches_and_syncs_is_charged_as_it_goes() {
    // The host reads GPU time only from the answers it waits for, not from a sync the completion
    // word answered: the worker must answer some syncs itself, or such a tenant is never charged
    // (and its `gpu-seconds` quota never bites).
    let Some(mut w) = fake_worker() else { return };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 1024).unwrap();
    let args = iota_args(out, 1024);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let slice = Instant::now();
        let mut n = 0;
        while slice.elapsed() < Duration::from_millis(100) && n < 100_000 {
            w.launch(&launch(&m, "iota", 1024, &args, Duration::from_secs(5)))
                .unwrap();
            w.sync().unwrap();
            n += 1;
        }
        // The host's figure as of its last answer: no ping, no other call.
        seen.push((n, w.gpu_time()));
    }
    // Charged in every 100 ms slice, not only once the tenant does something else. (On a busy
    // machine a sync may take past `REPORT_EVERY`, and then the worker answers it anyway.)
    eprintln!(
        "{} syncs the completion word answered; (syncs, host's figure) by slice: {seen:?}",
        w.signalled_syncs()
    );
    for pair in seen.windows(2) {
        assert!(pair[1].1 > pair[0].1, "{seen:?}");
    }
    assert!(seen[0].1 > Duration::ZERO, "{seen:?}");
    // And the figure the host saw is the worker's, less at most the last slice's work.
    w.ping().unwrap();
    assert!(
        w.gpu_time() >= seen[3].1,
        "{:?} then {seen:?}",
        w.gpu_time()
    );
}

/// Launch + sync pairs, each with the driver's counts of what it did: `(signals, timed
/// records)` added by each pair.
fn launch_sync_pairs(
    w: &mut Worker,
    file: &PathBuf,
    m: &LoadedModule,
    n: usize,
) -> Vec<(u64, u64)> {
    (0..n)
        .map(|_| {
            let before = counts(file);
            w.launch(&launch(m, "empty", 1, &[], Duration::from_secs(5)))
                .unwrap();
            w.sync().unwrap();
            let c = since(before, counts(file));
            (c.signals, c.timed)
        })
        .collect()
}

#[test]
fn a_sync_the_worker_sees_finished_times_its_kernels_with_no_timed_event() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    w.sync().unwrap();
    // A signalled sync whose word the worker sees, its last group's event reading done: the
    // segment ends on the host's clock, with no timed event. (A sync the worker answers itself
    // to report the time, one a millisecond at most, is timed on the device.)
    let pairs = launch_sync_pairs(&mut w, &file, &m, 60);
    let signalled: Vec<_> = pairs.iter().filter(|p| p.0 == 1).collect();
    let untimed = signalled.iter().filter(|p| p.1 == 0).count();
    assert!(
        signalled.len() >= 10 && untimed * 2 > signalled.len(),
        "(signals, timed records) by pair: {pairs:?}"
    );
    // Charged for the device's work, not for the time it sat idle between pairs.
    w.ping().unwrap();
    let before = w.gpu_time();
    let idle = Duration::from_millis(300);
    for _ in 0..2 {
        w.launch(&launch(&m, "empty", 1, &[], Duration::from_secs(5)))
            .unwrap();
        w.sync().unwrap();
        std::thread::sleep(idle);
    }
    w.ping().unwrap();
    let charged = w.gpu_time() - before;
    assert!(
        charged > Duration::ZERO && charged < idle / 2,
        "{charged:?} charged for two pairs {idle:?} apart"
    );
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_completion_word_seen_before_the_devices_event_is_not_taken_as_the_end() {
    // The word lands at once, but the events read not-ready for 100 ms (as a word a kernel
    // forged would, its kernels still running): the worker does not take the word's arrival as
    // the end of the lease's work, and times the segment on the device. (With 3 ms, a worker
    // descheduled that long on a loaded CI machine saw the event done, rightly ending on its
    // clock.)
    let Some((mut w, file)) = counting_worker(&["FAKE_CUDA_EVENT_LAG_US=100000"]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    w.sync().unwrap();
    let before = counts(&file);
    let pairs = launch_sync_pairs(&mut w, &file, &m, 10);
    w.ping().unwrap();
    // (Counted over all the pairs: the host may see a sync's word while its worker is still
    // recording, so a pair's last record can fall in the next pair's count.)
    let c = since(before, counts(&file));
    assert!(c.signals > 0, "{pairs:?}");
    assert_eq!(
        c.timed, 20,
        "a clock and an end event for each pair: {c:?}; (signals, timed records) by pair: {pairs:?}"
    );
    w.ping().unwrap();
    assert!(w.gpu_time() > Duration::ZERO);
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_long_run_of_launches_without_a_wait_is_timed_in_several_segments() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let m = w.load_module(FAULTS_PTX).unwrap();
    w.sync().unwrap();
    // 400 launches queued while the worker is stopped: it takes them 16 at a time without
    // idling or waiting (nothing is pending long). The fake driver rewrites its counts file at
    // every launch, so they take several milliseconds: the segment is ended and a new one begun
    // as it goes (`SEGMENT_SPAN`), each timed on the timing stream.
    let before = counts(&file);
    stop(&w);
    for _ in 0..400 {
        w.launch(&launch(&m, "empty", 1, &[], Duration::from_secs(5)))
            .unwrap();
    }
    w.signal_for_test(libc::SIGCONT);
    w.sync().unwrap();
    w.ping().unwrap();
    let c = since(before, counts(&file));
    assert_eq!(c.launches, 400);
    assert_eq!(c.timed_on_work_stream, 0, "{c:?}");
    assert!(
        c.timed >= 4 && c.timed.is_multiple_of(2),
        "400 launches over several ms timed as one segment: {c:?}"
    );
    assert!(w.gpu_time() > Duration::ZERO);
    let _ = std::fs::remove_file(file);
}

/// Loads through the host's module cache, worker by worker: a load that compiles makes the PTX
/// an image through the driver's linker; a second worker loads that image without JIT and its
/// kernel runs; an image the device refuses is replaced by a JIT of the PTX, and said so; an
/// image the linker made that the device refuses is never handed on; the worker's own cache
/// answers first.
#[test]
fn a_cached_image_loads_in_another_worker_without_jit() {
    let Some(cmd) = fake_command() else { return };
    let log = scratch_dir().join("jit-log");
    let _ = std::fs::remove_file(&log);
    let spawn = |env: &[&str]| {
        let mut cmd = cmd.clone();
        cmd.args
            .insert(0, format!("FAKE_CUDA_JIT_LOG={}", log.display()));
        for (i, e) in env.iter().enumerate() {
            cmd.args.insert(1 + i, (*e).into());
        }
        Worker::spawn(&cmd, BackendKind::Cuda, u64::MAX, Duration::from_secs(10))
            .expect("a worker on the fake driver")
    };
    let events = || -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let mut a = spawn(&[]);
    let (ma, ca) = a.load_module_cached(IOTA_PTX, &[]).unwrap();
    assert!(ca.image.starts_with(b"\x7fELF"), "the linker's image kept");
    assert!(ca.ptx.is_empty() && !ca.image_refused);
    let first = vec![format!("jit {}", a.pid()), format!("image {}", a.pid())];
    assert_eq!(events(), first, "compiled, then its image loaded");

    let mut b = spawn(&[]);
    let (mb, cb) = b.load_module_cached(IOTA_PTX, &ca.image).unwrap();
    assert_eq!(cb, tasklet_worker::Compiled::default(), "nothing compiled");
    assert_eq!(mb.kernels, ma.kernels, "the kernel table from the PTX");
    assert_eq!(
        events(),
        [first, vec![format!("image {}", b.pid())]].concat(),
        "the second worker loaded the image, no JIT"
    );
    let out = b.alloc(4 * 64).unwrap();
    let args = iota_args(out, 64);
    b.launch(&launch(&mb, "iota", 64, &args, Duration::from_secs(5)))
        .unwrap();
    b.sync().unwrap();
    let mut data = vec![0u8; 4 * 64];
    b.read(out, &mut data).unwrap();
    let vals: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(vals, (1..=64).collect::<Vec<u32>>());

    // The same text again on b: its own cache, before any image (here a bad one).
    let (_, again) = b.load_module_cached(IOTA_PTX, b"not an image").unwrap();
    assert_eq!(again, tasklet_worker::Compiled::default());
    assert_eq!(events().len(), 3, "a lookup: {:?}", events());

    // An image the device refuses, for text b has not loaded: compiled from the PTX instead.
    let other = format!("{IOTA_PTX}\n// another text\n");
    for bad in [
        &b"not an image"[..],
        &[0x7f, b'E', b'L', b'F', 2, 0, 0, 0][..],
        &[][..],
    ] {
        let mut bad_image = ca.image.clone();
        if !bad.is_empty() {
            bad_image = bad.to_vec();
        } else {
            // A well-formed ELF the device refuses: the fake's mark overwritten.
            bad_image[64] = b'X';
        }
        let mut c = spawn(&[]);
        let (mc, cc) = c.load_module_cached(&other, &bad_image).unwrap();
        assert!(cc.image_refused, "refusal reported");
        assert!(cc.image.starts_with(b"\x7fELF"), "a fresh image made");
        assert_eq!(mc.kernels[0].name, "iota");
        let of_c: Vec<String> = events()
            .into_iter()
            .filter(|e| e.ends_with(&format!(" {}", c.pid())))
            .collect();
        assert_eq!(
            of_c,
            vec![format!("jit {}", c.pid()), format!("image {}", c.pid())],
            "compiled from the PTX, its own image loaded"
        );
    }

    // A linker whose image the device refuses: the load still JITs and nothing is handed on.
    let mut d = spawn(&["FAKE_CUDA_BAD_CUBIN=1"]);
    let (md, cd) = d.load_module_cached(&other, &[]).unwrap();
    assert!(cd.image.is_empty() && !cd.image_refused, "{cd:?}");
    assert_eq!(md.kernels[0].name, "iota");
    let jits = events()
        .iter()
        .filter(|e| **e == format!("jit {}", d.pid()))
        .count();
    assert_eq!(jits, 2, "the link, then the JIT: {:?}", events());

    // A load the JIT refuses is refused alike through the linker, with its log.
    let (k, m) = op_error(d.load_module_cached(&format!("{IOTA_PTX}\nbogus\n"), &[]));
    assert_eq!(k, ErrorKind::LoadFailed);
    assert!(
        m.contains("line 7") && m.contains("CUDA_ERROR_INVALID_PTX"),
        "{m}"
    );
    let _ = std::fs::remove_file(&log);
}

/// A copy told which launches it needs (`*_after`, as a copy on a tenant's stream is) waits for
/// those only, and runs beside the later kernels; one told nothing waits for every launch. The
/// fake's events read not-ready for 300 ms after they are recorded, as the completion of a
/// kernel that long would: a copy that waits for the kernel takes that long, one that does not
/// returns at once.
#[test]
fn a_copy_waits_only_for_the_launches_it_is_told() {
    const LAG: Duration = Duration::from_millis(300);
    let Some((mut w, _file)) = counting_worker(&["FAKE_CUDA_EVENT_LAG_US=300000"]) else {
        return;
    };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 16).unwrap();
    let other = w.alloc(64).unwrap();
    // The zeroing of new memory is ordered by the worker's stream alone: until a sync, every
    // copy goes in order with everything.
    w.sync().unwrap();
    w.write(other, &[7; 64]).unwrap();
    let timed = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed()
    };

    w.launch(&launch(
        &m,
        "iota",
        16,
        &iota_args(out, 16),
        Duration::from_secs(5),
    ))
    .unwrap();
    let mut back = [0u8; 64];
    let beside = timed(&mut || {
        w.read_after(other, &mut back, Some(0)).unwrap();
        w.write_after(other, &[9; 64], Some(0)).unwrap();
    });
    assert_eq!(back, [7; 64]);
    assert!(
        beside < LAG / 2,
        "a copy that needs no launch waited {beside:?} for the kernel"
    );
    let mut got = [0u8; 4 * 16];
    let after_it = timed(&mut || w.read_after(out, &mut got, Some(1)).unwrap());
    assert!(
        after_it >= LAG * 2 / 3,
        "a copy that needs launch #1 returned after {after_it:?}, before its kernel was done"
    );
    let vals: Vec<u32> = got
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(vals, (1..=16).collect::<Vec<u32>>());

    // Told nothing, a copy waits for every launch (#2 here).
    w.launch(&launch(
        &m,
        "iota",
        16,
        &iota_args(out, 16),
        Duration::from_secs(5),
    ))
    .unwrap();
    let ordered = timed(&mut || w.read(other, &mut back).unwrap());
    assert_eq!(back, [9; 64]);
    assert!(ordered >= LAG * 2 / 3, "{ordered:?}");
    // Told a launch before the running one (#2, done), it does not wait for #3.
    w.launch(&launch(
        &m,
        "iota",
        16,
        &iota_args(out, 16),
        Duration::from_secs(5),
    ))
    .unwrap();
    let beside = timed(&mut || w.read_after(other, &mut back, Some(2)).unwrap());
    assert!(beside < LAG / 2, "{beside:?}");
    w.sync().unwrap();
}

/// A write of up to 64 KiB is answered once its bytes are staged, without waiting for the worker's
/// stream; a larger one waits; a read waits; staging memory that fills up is freed by one wait.
/// What the staged copies wrote is what the reads see, in order.
#[test]
fn a_small_write_is_answered_before_its_copy_runs() {
    let Some((mut w, file)) = counting_worker(&[]) else {
        return;
    };
    let small = w.alloc(4096).unwrap();
    let big = w.alloc(128 << 10).unwrap();
    w.sync().unwrap();

    let before = counts(&file);
    w.write(small, &[1; 4096]).unwrap();
    assert_eq!(
        since(before, counts(&file)).work_syncs,
        0,
        "a 4 KiB write waited for the stream"
    );
    w.write(big, &vec![2; 128 << 10]).unwrap();
    assert_eq!(
        since(before, counts(&file)).work_syncs,
        1,
        "a 128 KiB write is not staged"
    );
    let mut back = vec![0u8; 4096];
    w.read(small, &mut back).unwrap();
    assert_eq!(back, vec![1; 4096]);
    assert_eq!(
        since(before, counts(&file)).work_syncs,
        2,
        "a read waits for its stream"
    );

    // 1 MiB of staging holds sixteen 64 KiB writes: the seventeenth first waits for them.
    let chunks = w.alloc(17 << 16).unwrap();
    w.sync().unwrap();
    let before = counts(&file);
    for i in 0..17u64 {
        w.write(chunks + (i << 16), &vec![i as u8 + 1; 1 << 16])
            .unwrap();
    }
    assert_eq!(since(before, counts(&file)).work_syncs, 1);
    let mut all = vec![0u8; 17 << 16];
    w.read(chunks, &mut all).unwrap();
    for (i, c) in all.chunks(1 << 16).enumerate() {
        assert!(c.iter().all(|&b| b == i as u8 + 1), "chunk {i}");
    }
    w.sync().unwrap();
}

/// A copy on the copy stream, beside a kernel still running, follows the staged writes queued
/// before that kernel: it is made to wait for their event on the device (one more
/// `cuStreamWaitEvent` than the same launch and copy with nothing staged), not for the kernel.
#[test]
fn a_copy_beside_a_kernel_follows_the_staged_writes_before_it() {
    const LAG: Duration = Duration::from_millis(300);
    let Some((mut w, file)) = counting_worker(&["FAKE_CUDA_EVENT_LAG_US=300000"]) else {
        return;
    };
    let m = w.load_module(IOTA_PTX).unwrap();
    let out = w.alloc(4 * 16).unwrap();
    let other = w.alloc(64).unwrap();
    w.sync().unwrap();
    // A launch, then a copy beside it: (event waits, the copy's time, the bytes read).
    let beside = |w: &mut Worker| {
        let before = counts(&file);
        w.launch(&launch(
            &m,
            "iota",
            16,
            &iota_args(out, 16),
            Duration::from_secs(5),
        ))
        .unwrap();
        let t = Instant::now();
        let mut back = [0u8; 64];
        w.read_after(other, &mut back, Some(0)).unwrap();
        let took = t.elapsed();
        let waits = since(before, counts(&file)).event_waits;
        // Waits for the kernel in the worker too (the fake's completion store, which ends a
        // sync at the host, does not wait for the fake's lagging events).
        w.read(other, &mut [0; 64]).unwrap();
        (waits, took, back)
    };
    w.write(other, &[5; 64]).unwrap();
    w.sync().unwrap();
    let (plain, took, back) = beside(&mut w);
    assert_eq!(back, [5; 64]);
    assert!(took < LAG / 2, "the copy waited {took:?} for the kernel");

    w.write(other, &[6; 64]).unwrap();
    let (staged, took, back) = beside(&mut w);
    assert_eq!(back, [6; 64]);
    assert!(took < LAG / 2, "the copy waited {took:?} for the kernel");
    assert_eq!(
        staged,
        plain + 1,
        "the copy stream did not wait for the staged write"
    );
}
