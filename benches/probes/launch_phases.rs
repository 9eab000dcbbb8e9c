//! Where the time of one launch + sync goes between the host and a cuda worker, phase by phase.
//!
//!     cargo bench -p tasklet-benches --bench launch_phases \
//!         [-- [iterations] [rounds] [worker-cpu] [host-cpu]]
//!
//! Runs the worker's real serving loop (`serve`) on a thread of this process over a real shared
//! region, so host and worker timestamps share one clock, with the backend wrapped to note when
//! `launch` and `sync` begin and end. Rows, per phase, medians over the iterations of each round
//! and then over rounds:
//!
//! - the same empty kernel natively (launch + `cuStreamSynchronize`, non-blocking stream) and
//!   straight into the backend on one thread (`CudaBackend::launch` + `sync`, no channel);
//! - through the channel: host post → worker in `launch`; in `launch`; `launch` → `sync`;
//!   in `sync`; `sync` returned → host has the answer; and the whole (the host waits for the
//!   worker's answer);
//! - the whole again with the host taking the completion word the GPU stores (what `Worker::sync`
//!   does): the hand-off back to the host is gone;
//! - async launch throughput: bursts of 1000 launches and one wait, per launch, raw, straight into
//!   the backend (one by one, and in batches of 16), and through the channel (which of host and
//!   worker bounds it), with the time the worker spent inside the backend's `launch_batch` (the
//!   rest is its serving loop and waiting) and how many launches it took together;
//! - the tail: p50 and p99 of the pairs timed one by one, natively on one thread, straight into
//!   the backend, and through the channel (two threads), each p99 against native's: what the
//!   hand-off between the tenant's side and the driver's does to the tail, with no wasm on the way.
//!
//! Needs a CUDA device; says "skipped: no CUDA device" and exits 0 without one.

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed},
};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tasklet_worker::contract::channel::{
    Answer, HostEnd, SharedRegion, WorkerEnd, DEFAULT_DATA_SIZE,
};
use tasklet_worker::contract::codec::{decode_response, encode_request};
use tasklet_worker::contract::{Launch, LoadedModule, Request, Response, WorkerInfo};
use tasklet_worker::worker::backend::cuda::driver;
use tasklet_worker::worker::backend::{Backend, BackendError, BackendOptions};
use tasklet_worker::CudaBackend;

const PTX: &str = include_str!("../../kernels/faults.ptx");

static EPOCH: OnceLock<Instant> = OnceLock::new();

fn now_ns() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// When the worker entered and left `launch` and `sync` last, and the time it spent in
/// `launch` in all (for the share of a burst the backend takes).
#[derive(Default)]
struct Marks {
    launch_in: AtomicU64,
    launch_out: AtomicU64,
    sync_in: AtomicU64,
    sync_out: AtomicU64,
    in_launch_total: AtomicU64,
    /// Calls of `launch_batch` (the serving loop hands every posted launch over through it).
    batches: AtomicU64,
}

struct Timed {
    inner: CudaBackend,
    marks: Arc<Marks>,
}

impl Backend for Timed {
    fn info(&self) -> WorkerInfo {
        self.inner.info()
    }
    fn alloc(&mut self, bytes: u64) -> Result<u64, BackendError> {
        self.inner.alloc(bytes)
    }
    fn free(&mut self, addr: u64) -> Result<(), BackendError> {
        self.inner.free(addr)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        self.inner.write(addr, data)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read(addr, out)
    }
    fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), BackendError> {
        self.inner.copy(dst, src, len)
    }
    fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, BackendError> {
        self.inner.load_module(ptx)
    }
    fn load_source(
        &mut self,
        source: &str,
        options: &[&str],
    ) -> Result<LoadedModule, BackendError> {
        self.inner.load_source(source, options)
    }
    fn unload_module(&mut self, id: u32) -> Result<(), BackendError> {
        self.inner.unload_module(id)
    }
    fn kernel_name(&self, module: u32, kernel: u32) -> Option<&str> {
        self.inner.kernel_name(module, kernel)
    }
    fn launch(&mut self, l: &Launch<'_>) -> Result<(), BackendError> {
        let t0 = now_ns();
        self.marks.launch_in.store(t0, Relaxed);
        let r = self.inner.launch(l);
        let t1 = now_ns();
        self.marks.launch_out.store(t1, Relaxed);
        self.marks.in_launch_total.fetch_add(t1 - t0, Relaxed);
        r
    }
    fn launch_batch(&mut self, launches: &[Launch<'_>]) -> Result<(), (usize, BackendError)> {
        let t0 = now_ns();
        self.marks.launch_in.store(t0, Relaxed);
        let r = self.inner.launch_batch(launches);
        let t1 = now_ns();
        self.marks.launch_out.store(t1, Relaxed);
        self.marks.in_launch_total.fetch_add(t1 - t0, Relaxed);
        self.marks.batches.fetch_add(1, Relaxed);
        r
    }
    fn sync(&mut self) -> Result<(), BackendError> {
        self.marks.sync_in.store(now_ns(), Relaxed);
        let r = self.inner.sync();
        self.marks.sync_out.store(now_ns(), Relaxed);
        r
    }
    fn sync_signalling(&mut self, seq: u32) -> Result<(), BackendError> {
        self.marks.sync_in.store(now_ns(), Relaxed);
        let r = self.inner.sync_signalling(seq);
        self.marks.sync_out.store(now_ns(), Relaxed);
        r
    }
    fn reset(&mut self) -> Result<(), BackendError> {
        self.inner.reset()
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
}

/// The backend's driver calls, made raw: `empty` from its own module on the same (primary)
/// context, a non-blocking stream of its own (as the backend's), one timing-disabled event.
struct Raw {
    d: &'static driver::Driver,
    f: driver::CuFunction,
    ev: driver::CuEvent,
    pool: Vec<driver::CuEvent>,
    stream: driver::CuStream,
}

impl Raw {
    fn new() -> Raw {
        let d = driver::driver().expect("driver loaded by the backend");
        let src = std::ffi::CString::new(PTX).expect("PTX has no NUL");
        let (mut m, mut f, mut ev, mut stream) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: valid out-pointers, NUL-terminated PTX; the backend made the context current.
        unsafe {
            assert_eq!(
                (d.module_load_data_ex)(
                    &mut m,
                    src.as_ptr().cast(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                0
            );
            assert_eq!((d.module_get_function)(&mut f, m, c"empty".as_ptr()), 0);
            assert_eq!((d.event_create)(&mut ev, 2), 0);
            // CU_STREAM_NON_BLOCKING
            assert_eq!((d.stream_create)(&mut stream, 1), 0);
        }
        let pool = (0..128)
            .map(|_| {
                let mut e = std::ptr::null_mut();
                // SAFETY: valid out-pointer; the context is current.
                assert_eq!(unsafe { (d.event_create)(&mut e, 2) }, 0);
                e
            })
            .collect();
        Raw {
            d,
            f,
            ev,
            pool,
            stream,
        }
    }

    fn launch(&self) {
        // SAFETY: a resolved function with no parameters, our stream.
        let r = unsafe {
            (self.d.launch_kernel)(
                self.f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(r, 0);
    }

    /// `BURST` launches, `between(i)` after launch `i`, then one wait: µs per launch.
    fn burst(&self, mut between: impl FnMut(usize)) -> f64 {
        let t0 = Instant::now();
        for i in 0..BURST {
            self.launch();
            between(i);
        }
        self.record_and_poll();
        t0.elapsed().as_secs_f64() * 1e6 / BURST as f64
    }

    fn record_pooled(&self, group: usize) {
        // SAFETY: a live event of the pool; our stream.
        assert_eq!(
            unsafe { (self.d.event_record)(self.pool[group % self.pool.len()], self.stream) },
            0
        );
    }

    fn record(&self) {
        // SAFETY: a live event; our stream.
        assert_eq!(unsafe { (self.d.event_record)(self.ev, self.stream) }, 0);
    }

    fn record_and_poll(&self) {
        // SAFETY: a live event; our stream.
        unsafe {
            assert_eq!((self.d.event_record)(self.ev, self.stream), 0);
            while (self.d.event_query)(self.ev) != 0 {}
        }
    }
}

/// Reads and writes every cache line of `data`.
fn touch(data: &mut [u8]) {
    for line in data.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    std::hint::black_box(data);
}

/// Pins the calling thread to `cpu`, if given.
fn pin(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        tasklet_worker::cpus::pin_current_thread(cpu)
            .unwrap_or_else(|e| panic!("pin to cpu {cpu}: {e}"));
    }
}

#[repr(C, align(4096))]
struct Page([u32; 1024]);

/// Async launch throughput: launches per burst (then one wait), bursts per round.
const BURST: usize = 1000;
const BATCHES: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The 99th percentile of one round's samples.
fn p99(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[(v.len() * 99).div_ceil(100).clamp(1, v.len()) - 1]
}

/// One `sync` waited for the way `Worker::sync` does: the completion word or the worker's answer.
fn signalled_sync(host: &mut HostEnd, id: &mut u64, frame: &mut Vec<u8>, resp: &mut Vec<u8>) {
    let far = Instant::now() + Duration::from_secs(30);
    *id += 1;
    frame.clear();
    encode_request(*id, &Request::Sync, frame);
    let seq = host.send(frame, far, &mut || None).expect("send");
    if host
        .wait_signalled(seq, far, &mut || None, resp)
        .expect("answer")
        == Answer::Response
    {
        assert_eq!(decode_response(resp).expect("decodable").1, Response::Ok);
    }
}

fn opts(data_region: Option<(usize, usize)>, completion_word: Option<usize>) -> BackendOptions {
    BackendOptions {
        device_memory: 1 << 30,
        emu_threads: 0,
        null: false,
        data_region,
        completion_word,
    }
}

/// A launch of `empty` (kernel `kernel` of `module`).
fn launch_req(module: u32, kernel: u32) -> Launch<'static> {
    Launch {
        module,
        kernel,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        args: &[],
        deadline: Duration::from_secs(10),
    }
}

/// The index of `empty` in faults.ptx's kernels as a load lists them.
fn empty_index(kernels: &[tasklet_worker::KernelInfo]) -> u32 {
    kernels
        .iter()
        .position(|k| k.name == "empty")
        .expect("faults.ptx has `empty`") as u32
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    // Optional CPUs for the worker (and the direct runs) and for the host thread: on a VM whose
    // vCPUs sit at different distances from the GPU, placement moves every figure by ~1 µs.
    let worker_cpu: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let host_cpu: Option<usize> = args.next().and_then(|s| s.parse().ok());
    pin(worker_cpu);
    now_ns();

    // Straight into the backend, on this thread, with a completion word of its own (a page like
    // the channel's header page) for the signalled rows.
    let page: &'static mut Page = Box::leak(Box::new(Page([0; 1024])));
    let word_addr = page.0.as_mut_ptr() as usize;
    let mut direct = match CudaBackend::open(&opts(None, Some(word_addr))) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let m = direct.load_module(PTX).expect("load faults.ptx");
    let l = launch_req(m.id, empty_index(&m.kernels));
    // The same driver calls the backend makes (launch, record, poll), raw, on the
    // same context, alternating with the backend round by round.
    let raw = Raw::new();
    let mut direct_rows: Vec<Vec<f64>> = vec![Vec::new(); 18];
    // Each round's p99 of the rows timed pair by pair (launch + wait), for the tail's rows.
    let mut direct_p99: Vec<Vec<f64>> = vec![Vec::new(); 18];
    // SAFETY: the word lies in the page the backend registered (device-mapped) at open.
    let word = unsafe { &*(word_addr as *const std::sync::atomic::AtomicU32) };
    let mut dev_word = 0u64;
    // SAFETY: valid out-pointer; a registered address.
    assert_eq!(
        unsafe { (raw.d.mem_host_get_device_pointer)(&mut dev_word, word_addr as *mut _, 0) },
        0
    );
    let mut seq = 0u32;
    let mut scratch = vec![0u8; 32 << 10];
    let mut launch_frame = Vec::new();
    encode_request(1, &Request::Launch(l.clone()), &mut launch_frame);
    for _ in 0..rounds {
        let mut t: Vec<Vec<f64>> = (0..18).map(|_| Vec::with_capacity(iters)).collect();
        for i in 0..iters + iters / 10 {
            let t0 = Instant::now();
            raw.launch();
            let t1 = Instant::now();
            raw.record_and_poll();
            let t2 = Instant::now();
            if i >= iters / 10 {
                t[0].push((t1 - t0).as_secs_f64() * 1e6);
                t[1].push((t2 - t1).as_secs_f64() * 1e6);
                t[2].push((t2 - t0).as_secs_f64() * 1e6);
            }
        }
        for i in 0..iters + iters / 10 {
            let t0 = Instant::now();
            direct.launch(&l).expect("launch");
            let t1 = Instant::now();
            direct.sync().expect("sync");
            let t2 = Instant::now();
            if i >= iters / 10 {
                t[3].push((t1 - t0).as_secs_f64() * 1e6);
                t[4].push((t2 - t1).as_secs_f64() * 1e6);
                t[5].push((t2 - t0).as_secs_f64() * 1e6);
            }
        }
        for i in 0..iters + iters / 10 {
            seq = seq.wrapping_add(1);
            let t0 = Instant::now();
            raw.launch();
            let t1 = Instant::now();
            // SAFETY: a registered, device-mapped word; our stream.
            assert_eq!(
                unsafe { (raw.d.stream_write_value32)(raw.stream, dev_word, seq, 0) },
                0
            );
            let t2 = Instant::now();
            while word.load(Acquire) != seq {
                std::hint::spin_loop();
            }
            let t3 = Instant::now();
            if i >= iters / 10 {
                t[6].push((t2 - t1).as_secs_f64() * 1e6);
                t[7].push((t3 - t0).as_secs_f64() * 1e6);
            }
        }
        for i in 0..iters + iters / 10 {
            seq = seq.wrapping_add(1);
            let t0 = Instant::now();
            direct.launch(&l).expect("launch");
            direct.sync_signalling(seq).expect("sync");
            let t1 = Instant::now();
            if i >= iters / 10 {
                t[8].push((t1 - t0).as_secs_f64() * 1e6);
                t[9].push(if word.load(Acquire) == seq { 1.0 } else { 0.0 });
            }
        }
        // Bursts (async launch throughput): BURST launches, then one wait; per launch.
        for _ in 0..BATCHES {
            let group = tasklet_worker::worker::backend::cuda::GROUP_MAX;
            t[11].push(raw.burst(|_| {}));
            // With an event recorded after every GROUP_MAX launches, as the backend's launch
            // groups do: what tracking the groups costs the driver. Then each group's event a
            // different one of a pool, as the backend's are.
            t[12].push(raw.burst(|i| {
                if (i + 1) % group == 0 {
                    raw.record()
                }
            }));
            t[13].push(raw.burst(|i| {
                if (i + 1) % group == 0 {
                    raw.record_pooled(i / group)
                }
            }));
            // Does other work between launches slow the driver's own (its data and code pushed
            // out of the caches)? Raw launches with, between them: 4 KiB and 32 KiB of other
            // data touched, and the worker's own decoding of a launch record.
            t[14].push(raw.burst(|_| touch(&mut scratch[..4 << 10])));
            t[15].push(raw.burst(|_| touch(&mut scratch[..32 << 10])));
            t[16].push(raw.burst(|_| {
                std::hint::black_box(
                    tasklet_worker::contract::codec::decode_request(std::hint::black_box(
                        &launch_frame,
                    ))
                    .is_ok(),
                );
            }));
            let t0 = Instant::now();
            for _ in 0..BURST {
                direct.launch(&l).expect("launch");
            }
            direct.sync().expect("sync");
            t[10].push(t0.elapsed().as_secs_f64() * 1e6 / BURST as f64);
            // The same launches handed over 16 at a time, as the serving loop takes a burst.
            let batch: [Launch<'_>; 16] = std::array::from_fn(|_| l.clone());
            let t0 = Instant::now();
            for _ in 0..BURST / batch.len() {
                direct
                    .launch_batch(&batch)
                    .unwrap_or_else(|(_, e)| panic!("launch batch: {e}"));
            }
            direct.sync().expect("sync");
            t[17].push(
                t0.elapsed().as_secs_f64() * 1e6 / (BURST / batch.len() * batch.len()) as f64,
            );
        }
        for (row, v) in direct_p99.iter_mut().zip(&t) {
            row.push(if v.is_empty() { 0.0 } else { p99(v) });
        }
        for (row, v) in direct_rows.iter_mut().zip(t) {
            row.push(median(v));
        }
    }
    drop(direct);

    // Through the channel, with the worker's serving loop on a thread.
    let region = SharedRegion::create(DEFAULT_DATA_SIZE).expect("shared region");
    // SAFETY: dup of our own open fd; `from_fd` takes the copy.
    let fd = unsafe { libc::dup(region.fd()) };
    let marks = Arc::new(Marks::default());
    let worker_marks = Arc::clone(&marks);
    std::thread::spawn(move || {
        pin(worker_cpu);
        let mut end = WorkerEnd::new(SharedRegion::from_fd(fd).expect("map region"));
        let (addr, len) = end.data_region();
        let inner = CudaBackend::open(&opts(
            Some((addr as usize, len)),
            Some(end.completion_word()),
        ))
        .expect("cuda backend in the worker thread");
        end.ready();
        let mut b = Timed {
            inner,
            marks: worker_marks,
        };
        tasklet_worker::worker::serve::serve(&mut end, &mut b, &mut || true);
    });
    pin(host_cpu);
    let mut host = HostEnd::new(region);
    let far = || Instant::now() + Duration::from_secs(30);
    host.wait_ready(far(), &mut || None)
        .expect("worker thread ready");
    let (mut frame, mut resp) = (Vec::new(), Vec::new());
    let mut id = 0u64;
    let mut call = |host: &mut HostEnd,
                    req: &Request<'_>,
                    frame: &mut Vec<u8>,
                    resp: &mut Vec<u8>|
     -> Response {
        id += 1;
        frame.clear();
        encode_request(id, req, frame);
        let seq = host.send(frame, far(), &mut || None).expect("send");
        host.wait(seq, far(), &mut || None, resp).expect("answer");
        decode_response(resp).expect("decodable").1
    };
    let (module, empty) = match call(
        &mut host,
        &Request::LoadModule { ptx: PTX },
        &mut frame,
        &mut resp,
    ) {
        Response::Module(m) => (m.id, empty_index(&m.kernels)),
        other => panic!("load-module answered {other:?}"),
    };
    let mut launch_frame = Vec::new();
    encode_request(
        1 << 40,
        &Request::Launch(launch_req(module, empty)),
        &mut launch_frame,
    );

    let names = [
        "host post → worker in launch",
        "in launch (cuLaunchKernel + books)",
        "launch returned → worker in sync",
        "in sync (event record + wait)",
        "sync returned → host has the answer",
        "whole launch + sync through the channel",
    ];
    let mut phase_rounds: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut signalled_rounds = Vec::new();
    let (mut whole_p99_rounds, mut signalled_p99_rounds) = (Vec::new(), Vec::new());
    let mut burst_rounds = Vec::new();
    let mut burst_in_launch_rounds = Vec::new();
    let mut burst_batch_rounds = Vec::new();
    let mut sync_id = 1u64 << 50;
    for _ in 0..rounds {
        let mut phases: Vec<Vec<f64>> = names.iter().map(|_| Vec::with_capacity(iters)).collect();
        for i in 0..iters + iters / 10 {
            let t0 = now_ns();
            host.post(&launch_frame, far(), &mut || None).expect("post");
            match call(&mut host, &Request::Sync, &mut frame, &mut resp) {
                Response::Ok => {}
                other => panic!("sync answered {other:?}"),
            }
            let t5 = now_ns();
            if i < iters / 10 {
                continue;
            }
            let m = [
                t0,
                marks.launch_in.load(Relaxed),
                marks.launch_out.load(Relaxed),
                marks.sync_in.load(Relaxed),
                marks.sync_out.load(Relaxed),
                t5,
            ];
            for p in 0..5 {
                phases[p].push(m[p + 1].saturating_sub(m[p]) as f64 / 1e3);
            }
            phases[5].push((t5 - t0) as f64 / 1e3);
        }
        whole_p99_rounds.push(p99(&phases[5]));
        for (p, v) in phases.into_iter().enumerate() {
            phase_rounds[p].push(median(v));
        }
        let mut whole = Vec::with_capacity(iters);
        for i in 0..iters + iters / 10 {
            let t0 = now_ns();
            host.post(&launch_frame, far(), &mut || None).expect("post");
            signalled_sync(&mut host, &mut sync_id, &mut frame, &mut resp);
            if i >= iters / 10 {
                whole.push((now_ns() - t0) as f64 / 1e3);
            }
        }
        signalled_p99_rounds.push(p99(&whole));
        signalled_rounds.push(median(whole));
        let mut bursts = Vec::with_capacity(BATCHES);
        let mut in_launch = Vec::with_capacity(BATCHES);
        let mut per_batch = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let before = marks.in_launch_total.load(Relaxed);
            let batches_before = marks.batches.load(Relaxed);
            let t0 = now_ns();
            for _ in 0..BURST {
                host.post(&launch_frame, far(), &mut || None).expect("post");
            }
            signalled_sync(&mut host, &mut sync_id, &mut frame, &mut resp);
            bursts.push((now_ns() - t0) as f64 / 1e3 / BURST as f64);
            in_launch
                .push((marks.in_launch_total.load(Relaxed) - before) as f64 / 1e3 / BURST as f64);
            per_batch
                .push(BURST as f64 / (marks.batches.load(Relaxed) - batches_before).max(1) as f64);
        }
        burst_batch_rounds.push(median(per_batch));
        burst_rounds.push(median(bursts));
        burst_in_launch_rounds.push(median(in_launch));
    }

    println!("| {:<44} | {:>8} |", "phase", "p50 µs");
    println!("|{:-<46}|{:-<10}|", "", "");
    let direct_names = [
        "raw driver: cuLaunchKernel",
        "raw driver: cuEventRecord + poll cuEventQuery",
        "raw driver: launch + record + poll",
        "backend direct: launch",
        "backend direct: sync",
        "backend direct: launch + sync, one thread",
        "raw driver: cuStreamWriteValue32 call",
        "raw driver: launch + write value + poll word",
        "backend direct: launch + signalled sync",
        "(signalled sync stored its word: 1 = yes)",
        "backend direct: burst, per launch",
        "raw driver: burst, per launch",
        "raw driver: burst, an event per 8 launches",
        "the same, the events from a pool of 128",
        "raw burst, 4 KiB of other data touched between",
        "raw burst, 32 KiB of other data touched between",
        "raw burst, a launch record decoded between",
        "backend direct: burst in batches of 16",
    ];
    for (name, v) in direct_names.iter().zip(&direct_rows) {
        println!("| {name:<44} | {:>8.2} |", median(v.clone()));
    }
    for (name, v) in names.iter().zip(&phase_rounds) {
        println!("| {name:<44} | {:>8.2} |", median(v.clone()));
    }
    println!(
        "| {:<44} | {:>8.2} |",
        "whole, host takes the GPU's completion word",
        median(signalled_rounds.clone())
    );
    println!(
        "| {:<44} | {:>8.2} |",
        "burst through the channel, per launch",
        median(burst_rounds)
    );
    println!(
        "| {:<44} | {:>8.2} |",
        "  of which the worker in `launch_batch`",
        median(burst_in_launch_rounds)
    );
    println!(
        "| {:<44} | {:>8.2} |",
        "  launches the worker took together, mean",
        median(burst_batch_rounds)
    );
    println!(
        "({rounds} rounds × {iters} iterations; worker cpu {worker_cpu:?}, host cpu {host_cpu:?}; phases are medians each, so they need not add up to the whole)"
    );

    // The tail: what the hand-off between two threads does to a pair's p99, with no wasm and
    // no checks on the way (contract 0.2's p99 target compares a tasklet with one thread of
    // native code).
    let raw_p99 = median(direct_p99[2].clone());
    println!();
    println!(
        "| {:<44} | {:>8} | {:>8} | {:>9} |",
        "launch + wait, pair by pair", "p50 µs", "p99 µs", "p99 ÷ raw"
    );
    println!("|{:-<46}|{:-<10}|{:-<10}|{:-<11}|", "", "", "", "");
    let tails = [
        (direct_names[2], median(direct_rows[2].clone()), raw_p99),
        (
            direct_names[5],
            median(direct_rows[5].clone()),
            median(direct_p99[5].clone()),
        ),
        (
            direct_names[8],
            median(direct_rows[8].clone()),
            median(direct_p99[8].clone()),
        ),
        (
            names[5],
            median(phase_rounds[5].clone()),
            median(whole_p99_rounds),
        ),
        (
            "whole, host takes the GPU's completion word",
            median(signalled_rounds.clone()),
            median(signalled_p99_rounds),
        ),
    ];
    for (name, p50, p99) in tails {
        println!(
            "| {name:<44} | {p50:>8.2} | {p99:>8.2} | {:>8.2}× |",
            p99 / raw_p99
        );
    }
    println!("(p99: the median over rounds of each round's p99)");
}
