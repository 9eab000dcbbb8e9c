//! How the ways of waiting for one empty kernel compare on this GPU, in one process, no worker:
//! the stream (legacy default vs non-blocking) crossed with the wait (`cuStreamSynchronize`,
//! polling `cuStreamQuery`, `cuEventRecord` + polling `cuEventQuery`, `cuStreamWriteValue32` into
//! page-locked host memory + polling that word, as the worker's completion word does). The cuda backend's
//! launch + sync is one of these plus the host↔worker hand-off; this says which one costs least.
//!
//!     cargo bench -p tasklet-benches --bench sync_paths [-- [iterations] [rounds]]
//!
//! Prints, per variant, the median over rounds of each round's median (rounds alternate the
//! variants, so drift hits them all alike), and its ratio to launch + `cuStreamSynchronize` on a
//! non-blocking stream (what native cudarc does). Needs a CUDA device; says so and exits 0
//! without one.

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tasklet_worker::worker::backend::cuda::driver::{
    self, CuEvent, CuFunction, CuModule, CuStream, Driver, CUDA_SUCCESS,
};

const PTX: &str = include_str!("../../kernels/faults.ptx");

fn ok(what: &str, r: i32) {
    assert_eq!(r, CUDA_SUCCESS, "{what} failed: code {r}");
}

struct Gpu {
    d: &'static Driver,
    f: CuFunction,
    ev: CuEvent,
    /// A page-locked, device-mapped word (host address, device address) and the last value stored.
    word: (*const AtomicU32, u64),
    seq: std::cell::Cell<u32>,
}

#[derive(Clone, Copy)]
enum Wait {
    Synchronize,
    PollStream,
    RecordPollEvent,
    RecordSyncEvent,
    /// `cuStreamWriteValue32` of a fresh value into page-locked host memory, then poll the word.
    WriteValuePollWord,
    /// The same with an event recorded after the write and polled between looks at the word (a
    /// worker that also tracks the kernel through the driver while the host polls the word).
    WriteValueRecordPollBoth,
    /// The worker's signalled sync before 2026-11-24: the group's event recorded, then the store,
    /// then poll the word.
    RecordWriteValuePollWord,
    /// The worker's signalled sync since: the store, then the group's event, then poll the word.
    WriteValueRecordPollWord,
    /// No kernel: `cuStreamWriteValue32` on an idle stream and poll the word (the store's own latency).
    WriteValueOnlyPollWord,
    /// Launch only (per launch of a back-to-back burst, no wait): the launch's own CPU cost.
    LaunchOnly,
}

impl Gpu {
    fn launch(&self, s: CuStream) {
        // SAFETY: a resolved function with no parameters.
        ok("cuLaunchKernel", unsafe {
            (self.d.launch_kernel)(
                self.f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        });
    }

    /// Queues the store of a fresh value into the word on `s`; returns the value.
    fn store_next(&self, s: CuStream) -> u32 {
        let v = self.seq.get().wrapping_add(1);
        self.seq.set(v);
        // SAFETY: a registered, device-mapped word; a live stream.
        ok("cuStreamWriteValue32", unsafe {
            (self.d.stream_write_value32)(s, self.word.1, v, 0)
        });
        v
    }

    fn once(&self, s: CuStream, w: Wait) {
        if !matches!(w, Wait::WriteValueOnlyPollWord) {
            self.launch(s);
        }
        // SAFETY: live stream and event of the current context.
        unsafe {
            match w {
                Wait::Synchronize => ok("cuStreamSynchronize", (self.d.stream_synchronize)(s)),
                Wait::PollStream => while (self.d.stream_query)(s) != CUDA_SUCCESS {},
                Wait::RecordPollEvent => {
                    ok("cuEventRecord", (self.d.event_record)(self.ev, s));
                    while (self.d.event_query)(self.ev) != CUDA_SUCCESS {}
                }
                Wait::RecordSyncEvent => {
                    ok("cuEventRecord", (self.d.event_record)(self.ev, s));
                    ok("cuStreamSynchronize", (self.d.stream_synchronize)(s));
                }
                // (Without a kernel for the second: `once` launched none.)
                Wait::WriteValuePollWord | Wait::WriteValueOnlyPollWord => {
                    let v = self.store_next(s);
                    while (*self.word.0).load(Ordering::Acquire) != v {
                        std::hint::spin_loop();
                    }
                }
                Wait::WriteValueRecordPollBoth => {
                    let v = self.store_next(s);
                    ok("cuEventRecord", (self.d.event_record)(self.ev, s));
                    while (*self.word.0).load(Ordering::Acquire) != v {
                        let _ = (self.d.event_query)(self.ev);
                    }
                }
                Wait::RecordWriteValuePollWord => {
                    ok("cuEventRecord", (self.d.event_record)(self.ev, s));
                    let v = self.store_next(s);
                    while (*self.word.0).load(Ordering::Acquire) != v {
                        std::hint::spin_loop();
                    }
                }
                Wait::WriteValueRecordPollWord => {
                    let v = self.store_next(s);
                    ok("cuEventRecord", (self.d.event_record)(self.ev, s));
                    while (*self.word.0).load(Ordering::Acquire) != v {
                        std::hint::spin_loop();
                    }
                }
                Wait::LaunchOnly => {}
            }
        }
    }
}

#[repr(C, align(4096))]
struct Page([u32; 1024]);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let d = match driver::driver() {
        Ok(d) => d,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let ctx = match tasklet_worker::worker::backend::cuda::open_context(d) {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let _ = ctx;
    let mut m: CuModule = std::ptr::null_mut();
    let src = CString::new(PTX).expect("PTX has no NUL");
    let mut f: CuFunction = std::ptr::null_mut();
    let mut nb: CuStream = std::ptr::null_mut();
    let mut ev: CuEvent = std::ptr::null_mut();
    // SAFETY: valid out-pointers, NUL-terminated PTX, context current.
    unsafe {
        ok(
            "cuModuleLoadDataEx",
            (d.module_load_data_ex)(
                &mut m,
                src.as_ptr().cast(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ),
        );
        ok(
            "cuModuleGetFunction",
            (d.module_get_function)(&mut f, m, c"empty".as_ptr()),
        );
        ok("cuStreamCreate", (d.stream_create)(&mut nb, 1));
        ok("cuEventCreate", (d.event_create)(&mut ev, 2));
    }
    // The word: a page of its own, registered device-mapped, as the worker's channel header is.
    let page = Box::leak(Box::new(Page([0; 1024])));
    let host = page.0.as_mut_ptr();
    let mut dev = 0u64;
    // SAFETY: a live, page-aligned page of ours, never freed (leaked); valid out-pointer.
    unsafe {
        ok(
            "cuMemHostRegister",
            (d.mem_host_register)(host.cast(), 4096, 2),
        );
        ok(
            "cuMemHostGetDevicePointer",
            (d.mem_host_get_device_pointer)(&mut dev, host.cast(), 0),
        );
    }
    let g = Gpu {
        d,
        f,
        ev,
        word: (host as *const AtomicU32, dev),
        seq: std::cell::Cell::new(0),
    };
    let legacy: CuStream = std::ptr::null_mut();
    let variants: Vec<(&str, CuStream, Wait)> = vec![
        (
            "non-blocking: launch + cuStreamSynchronize",
            nb,
            Wait::Synchronize,
        ),
        (
            "non-blocking: launch + poll cuStreamQuery",
            nb,
            Wait::PollStream,
        ),
        (
            "non-blocking: launch + record + poll cuEventQuery",
            nb,
            Wait::RecordPollEvent,
        ),
        (
            "non-blocking: launch + record + cuStreamSynchronize",
            nb,
            Wait::RecordSyncEvent,
        ),
        (
            "legacy: launch + cuStreamSynchronize",
            legacy,
            Wait::Synchronize,
        ),
        (
            "legacy: launch + poll cuStreamQuery",
            legacy,
            Wait::PollStream,
        ),
        (
            "legacy: launch + record + poll cuEventQuery",
            legacy,
            Wait::RecordPollEvent,
        ),
        (
            "non-blocking: launch + write value + poll host word",
            nb,
            Wait::WriteValuePollWord,
        ),
        (
            "non-blocking: launch + record + write value, poll word",
            nb,
            Wait::RecordWriteValuePollWord,
        ),
        (
            "non-blocking: launch + write value + record, poll word",
            nb,
            Wait::WriteValueRecordPollWord,
        ),
        (
            "legacy: launch + write value + poll host word",
            legacy,
            Wait::WriteValuePollWord,
        ),
        (
            "legacy: launch + write value + record, poll event & word",
            legacy,
            Wait::WriteValueRecordPollBoth,
        ),
        (
            "legacy: no kernel, write value + poll host word",
            legacy,
            Wait::WriteValueOnlyPollWord,
        ),
        (
            "non-blocking: launch only (burst, per launch)",
            nb,
            Wait::LaunchOnly,
        ),
        (
            "legacy: launch only (burst, per launch)",
            legacy,
            Wait::LaunchOnly,
        ),
    ];
    let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (i, &(_, s, w)) in variants.iter().enumerate() {
            for _ in 0..iters / 10 {
                g.once(s, w);
            }
            // SAFETY: plain sync of a live stream.
            unsafe { ok("cuStreamSynchronize", (d.stream_synchronize)(s)) };
            let mut t: Vec<f64> = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t0 = Instant::now();
                g.once(s, w);
                t.push(t0.elapsed().as_secs_f64() * 1e6);
                if matches!(w, Wait::LaunchOnly) && t.len().is_multiple_of(256) {
                    // Keep the driver queue short: the burst measures the launch, not a full queue.
                    unsafe { ok("cuStreamSynchronize", (d.stream_synchronize)(s)) };
                }
            }
            unsafe { ok("cuStreamSynchronize", (d.stream_synchronize)(s)) };
            per_round[i].push(median(t));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let base = median(per_round[0].clone());
    println!("| {:<54} | {:>9} | {:>6} |", "variant", "p50 µs", "ratio");
    println!("|{:-<56}|{:-<11}|{:-<8}|", "", "", "");
    for (i, (name, _, _)) in variants.iter().enumerate() {
        let m = median(per_round[i].clone());
        println!("| {name:<54} | {m:>9.2} | {:>5.2}× |", m / base);
    }
    println!("({rounds} rounds × {iters} iterations; ratio to the first row)");
}
