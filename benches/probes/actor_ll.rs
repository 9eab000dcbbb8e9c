//! Whether a ring whose slots validate themselves takes a bus round trip off a persistent
//! kernel's message round trip (issue 20's target: a round trip ≤ 0.4× a launch + sync of the
//! handler). Native, in one process, no worker, one run:
//!
//! - **head and slots**: `actor_scale` of `kernels/actor.ptx` over the product's rings
//!   (`tasklet_worker::contract::actor`): the kernel reads the inbox's head across the bus, then
//!   the slots (a second read), fences, then stores the outbox's head.
//! - **self-validating slots** (`actor_ll` of `actor_ll.cu` beside this file): every 8-byte word
//!   carries 4 bytes of the message and the message's sequence number + 1 above them; the kernel
//!   polls the slot's words themselves and answers each word as it sees it, with no head and no
//!   fence. Twice the bytes per message; the same transform (`in * 2 + 1`).
//! - **launch + sync** of `actor_scale` as a normal kernel over one message in device memory
//!   (the actors benchmark's "handler as a normal kernel").
//! - **the product's sequenced rings** (`Ring::push` / `Ring::pop` of the contract) under
//!   `actor_scale_seq` of `kernels/actor.ptx`, and under `actor_seq_flags` of `actor_seq.cu`
//!   beside this file: the same kernel with parts of its pass changed (the head read, the tail's
//!   stores, the fence, the last barrier), round trips by the client's spin before each message,
//!   and batches of 256.
//! - **replicated slots** (`actor_llc`): the inbox holds 1, 2, 4 or 8 replicas of the ring,
//!   each polled by its own group of threads, the groups' reads staggered; the round trip when
//!   this thread spins 0 to 1,500 ns before each message, as a client doing its own work between
//!   messages would (a message landing just after the kernel's read waits for the next read).
//!
//! Rings and control block in pinned host memory mapped for the device (`cuMemHostAlloc` with
//! `DEVICEMAP`); this thread writes and polls them without sleeping. Messages of 64 floats,
//! rings of 256 slots, round trips one message at a time, batches of 256.
//!
//!     cargo bench -p tasklet-benches --bench actor_ll [-- ROUND_TRIPS BATCHES]
//!
//! Needs a CUDA device; says so and exits 0 without one.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUdeviceptr, CUfunction, CUstream};
use tasklet_worker::contract::actor::{ring_bytes, ControlBlock, Ring, RingLayout, CONTROL_BYTES};

#[allow(dead_code)]
#[path = "../actors/messages.rs"]
mod messages;
use messages::{
    handler_control, handler_rings, message, ACTOR_PTX, ANSWER_AT, CONTROL_AT, FACTOR,
    HANDLER_BYTES, IN_AT, MESSAGE_BYTES, OUT_AT, SLOTS, THREADS, WARMUP, WIDTH,
};

const LL_PTX: &str = include_str!("actor_ll.ptx");
const SEQ_PTX: &str = include_str!("actor_seq.ptx");
/// Words of a self-validating slot: one per float.
const WORDS: u32 = WIDTH as u32;
const WAIT: Duration = Duration::from_secs(2);

fn ok(what: &str, r: sys::CUresult) -> Result<(), String> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(format!("{what}: {e:?}")),
    }
}

struct Gpu {
    stream: CUstream,
    scale: CUfunction,
    ll: CUfunction,
    llc: CUfunction,
    seq: CUfunction,
    seq_flags: CUfunction,
}

/// Pinned host memory mapped for the device: host pointer and device address.
struct Mapped {
    host: *mut u8,
    device: CUdeviceptr,
}

impl Mapped {
    fn new(bytes: usize) -> Result<Mapped, String> {
        let mut host = null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        unsafe {
            ok(
                "cuMemHostAlloc",
                sys::cuMemHostAlloc(&mut host, bytes, flags),
            )?;
            (host as *mut u8).write_bytes(0, bytes);
            let mut device = 0;
            ok(
                "cuMemHostGetDevicePointer",
                sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0),
            )?;
            Ok(Mapped {
                host: host.cast(),
                device,
            })
        }
    }
}

impl Gpu {
    fn new() -> Result<Gpu, String> {
        unsafe {
            ok("cuInit", sys::cuInit(0))?;
            let mut dev = 0;
            ok("cuDeviceGet", sys::cuDeviceGet(&mut dev, 0))?;
            let mut ctx = null_mut();
            ok(
                "cuDevicePrimaryCtxRetain",
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            )?;
            ok("cuCtxSetCurrent", sys::cuCtxSetCurrent(ctx))?;
            let mut stream = null_mut();
            ok(
                "cuStreamCreate",
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                ),
            )?;
            let function = |ptx: &str, name: &str| -> Result<CUfunction, String> {
                let text = CString::new(ptx).expect("PTX has no NUL");
                let mut module = null_mut();
                ok(
                    name,
                    sys::cuModuleLoadData(&mut module, text.as_ptr().cast()),
                )?;
                let mut f = null_mut();
                let c = CString::new(name).expect("a name");
                ok(name, sys::cuModuleGetFunction(&mut f, module, c.as_ptr()))?;
                Ok(f)
            };
            Ok(Gpu {
                stream,
                scale: function(ACTOR_PTX, "actor_scale")?,
                ll: function(LL_PTX, "actor_ll")?,
                llc: function(LL_PTX, "actor_llc")?,
                seq: function(ACTOR_PTX, "actor_scale_seq")?,
                seq_flags: function(SEQ_PTX, "actor_seq_flags")?,
            })
        }
    }

    fn launch(&self, f: CUfunction, threads: u32, args: &mut [*mut c_void]) -> Result<(), String> {
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                1,
                1,
                1,
                threads,
                1,
                1,
                0,
                self.stream,
                args.as_mut_ptr(),
                null_mut(),
            )
        };
        ok("cuLaunchKernel", r)
    }

    fn wait(&self) -> Result<(), String> {
        let until = Instant::now() + WAIT;
        loop {
            match unsafe { sys::cuStreamQuery(self.stream) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY if Instant::now() < until => {
                    std::thread::sleep(Duration::from_micros(50))
                }
                e => return Err(format!("the kernel did not return: {e:?}")),
            }
        }
    }
}

/// Round trips (ns each) and batches (ns each) of one way.
struct Times {
    rtt: Vec<u64>,
    batches: Vec<u64>,
}

fn want(k: u32) -> f32 {
    (k % 1024) as f32 * FACTOR + 1.0
}

/// `actor_ll` over self-validating rings, `threads` threads with loads in flight for `window`
/// messages each; `fence`: a system fence after each run of answers.
fn self_validating(
    gpu: &Gpu,
    n: u32,
    b: u32,
    threads: u32,
    window: u32,
    fence: bool,
) -> Result<Times, String> {
    let ring = (SLOTS * WORDS * 8) as usize;
    let mem = Mapped::new(2 * ring + CONTROL_BYTES)?;
    let word = |base: usize, i: usize| -> &AtomicU64 {
        // SAFETY: inside the mapping, 8-aligned; the device accesses it with 8-byte accesses.
        unsafe { AtomicU64::from_ptr(mem.host.add(base + i * 8).cast()) }
    };
    let (mut a, mut o, mut cap, mut w, mut c, mut f, mut win, mut fe, mut lim) = (
        mem.device,
        mem.device + ring as u64,
        SLOTS,
        WORDS,
        mem.device + 2 * ring as u64,
        FACTOR,
        window,
        u32::from(fence),
        0u32,
    );
    let mut args: [*mut c_void; 9] = [
        (&mut a as *mut u64).cast(),
        (&mut o as *mut u64).cast(),
        (&mut cap as *mut u32).cast(),
        (&mut w as *mut u32).cast(),
        (&mut c as *mut u64).cast(),
        (&mut f as *mut f32).cast(),
        (&mut win as *mut u32).cast(),
        (&mut fe as *mut u32).cast(),
        (&mut lim as *mut u32).cast(),
    ];
    gpu.launch(gpu.ll, threads, &mut args)?;
    let mut exchange = |first: u32, count: u32| -> Result<u64, String> {
        let start = Instant::now();
        for j in 0..count {
            let m = first + j;
            let v = ((m % 1024) as f32).to_bits() as u64 | (u64::from(m + 1) << 32);
            let slot = (m % SLOTS) as usize * WORDS as usize;
            for i in 0..WORDS as usize {
                word(0, slot + i).store(v, Ordering::Release);
            }
        }
        let until = start + WAIT;
        let mut bad = None;
        for j in 0..count {
            let m = first + j;
            let slot = (m % SLOTS) as usize * WORDS as usize;
            for i in (0..WORDS as usize).rev() {
                let mut polls = 0u32;
                let v = loop {
                    let v = word(ring, slot + i).load(Ordering::Acquire);
                    if (v >> 32) as u32 == m + 1 {
                        break v;
                    }
                    polls = polls.wrapping_add(1);
                    if polls.is_multiple_of(256) && Instant::now() > until {
                        return Err(format!("message {m}: no answer within 2 s"));
                    }
                    std::hint::spin_loop();
                };
                if f32::from_bits(v as u32) != want(m) {
                    bad = Some(m);
                }
            }
        }
        let t = start.elapsed().as_nanos() as u64;
        match bad {
            Some(m) => Err(format!("message {m}: a wrong answer")),
            None => Ok(t),
        }
    };
    let times = run(n, b, &mut exchange);
    word(2 * ring, 0).store(1 << 32, Ordering::Release); // should_terminate (bytes 4..8)
    gpu.wait()?;
    times
}

/// Which kernel serves the product's rings (`tasklet_worker::contract::actor`).
#[derive(Clone, Copy)]
enum Product {
    /// `actor_scale` over head-and-slots rings.
    Plain,
    /// `actor_scale_seq` over sequenced rings.
    Sequenced,
    /// `actor_seq_flags` of `actor_seq.cu` over sequenced rings, with these flags.
    SequencedFlags(u32),
}

/// The product's rings (`Ring::push` / `Ring::pop`) under `kernel`: `n` round trips, each
/// next message sent `think_ns` after the answer (spinning), then `b` batches of `SLOTS`.
fn product_rings(
    gpu: &Gpu,
    kernel: Product,
    n: u32,
    b: u32,
    think_ns: u64,
) -> Result<Times, String> {
    let (layout, function, flags) = match kernel {
        Product::Plain => (RingLayout::Plain, gpu.scale, None),
        Product::Sequenced => (RingLayout::Sequenced, gpu.seq, None),
        Product::SequencedFlags(f) => (RingLayout::Sequenced, gpu.seq_flags, Some(f)),
    };
    let ring = ring_bytes(layout, SLOTS, MESSAGE_BYTES).expect("a small ring");
    let mem = Mapped::new(2 * ring + CONTROL_BYTES)?;
    // SAFETY: page-aligned, long enough, never freed (the process ends after the probe).
    let (inbox, outbox, control) = unsafe {
        (
            Ring::create(mem.host, layout, SLOTS, MESSAGE_BYTES),
            Ring::create(mem.host.add(ring), layout, SLOTS, MESSAGE_BYTES),
            ControlBlock::at(mem.host.add(2 * ring)),
        )
    };
    control.start();
    let (mut a, mut o, mut c, mut f, mut fl) = (
        mem.device,
        mem.device + ring as u64,
        mem.device + 2 * ring as u64,
        FACTOR,
        flags.unwrap_or(0),
    );
    let mut args: [*mut c_void; 5] = [
        (&mut a as *mut u64).cast(),
        (&mut o as *mut u64).cast(),
        (&mut c as *mut u64).cast(),
        (&mut f as *mut f32).cast(),
        (&mut fl as *mut u32).cast(),
    ];
    let given = if flags.is_some() { 5 } else { 4 };
    gpu.launch(function, THREADS, &mut args[..given])?;
    let (mut req, mut ans) = (Vec::new(), Vec::new());
    let mut exchange = |first: u32, count: u32| -> Result<u64, String> {
        req.clear();
        ans.clear();
        for j in 0..count {
            message(first + j, &mut req);
        }
        if count == 1 {
            let think_until = Instant::now() + Duration::from_nanos(think_ns);
            while Instant::now() < think_until {
                std::hint::spin_loop();
            }
        }
        let start = Instant::now();
        let sent = inbox.push(&req).map_err(|e| e.to_string())?;
        if sent != count {
            return Err(format!("{sent} of {count} fit"));
        }
        let until = start + WAIT;
        let mut got = 0;
        while got < count {
            got += outbox
                .pop(count - got, &mut ans)
                .map_err(|e| e.to_string())?;
            if got < count && Instant::now() > until {
                return Err(format!("message {}: no answer within 2 s", first + got));
            }
        }
        let t = start.elapsed().as_nanos() as u64;
        for (j, a) in ans.chunks_exact(4).enumerate() {
            let k = first + (j / WIDTH) as u32;
            if f32::from_le_bytes([a[0], a[1], a[2], a[3]]) != want(k) {
                return Err(format!("message {k}: a wrong answer"));
            }
        }
        Ok(t)
    };
    let times = run(n, b, &mut exchange);
    control.ask_to_terminate();
    gpu.wait()?;
    times
}

/// `actor_llc` over an inbox of `copies` replicas polled `stagger_ns` apart: `n` round trips,
/// each next message sent `think_ns` after the answer to the last (spinning), as a client that
/// does some work between messages would.
fn replicated(
    gpu: &Gpu,
    n: u32,
    copies: u32,
    stagger_ns: u32,
    think_ns: u64,
) -> Result<Vec<u64>, String> {
    let ring = (SLOTS * WORDS * 8) as usize;
    let mem = Mapped::new((copies as usize + 1) * ring + CONTROL_BYTES)?;
    let word = |base: usize, i: usize| -> &AtomicU64 {
        // SAFETY: inside the mapping, 8-aligned; the device accesses it with 8-byte accesses.
        unsafe { AtomicU64::from_ptr(mem.host.add(base + i * 8).cast()) }
    };
    let out_at = copies as usize * ring;
    let control_at = out_at + ring;
    let (mut a, mut o, mut cap, mut w, mut cp, mut st, mut c, mut f) = (
        mem.device,
        mem.device + out_at as u64,
        SLOTS,
        WORDS,
        copies,
        stagger_ns,
        mem.device + control_at as u64,
        FACTOR,
    );
    let mut args: [*mut c_void; 8] = [
        (&mut a as *mut u64).cast(),
        (&mut o as *mut u64).cast(),
        (&mut cap as *mut u32).cast(),
        (&mut w as *mut u32).cast(),
        (&mut cp as *mut u32).cast(),
        (&mut st as *mut u32).cast(),
        (&mut c as *mut u64).cast(),
        (&mut f as *mut f32).cast(),
    ];
    gpu.launch(gpu.llc, copies * WORDS, &mut args)?;
    let mut times = Vec::with_capacity(n as usize);
    let mut result = Ok(());
    for m in 0..WARMUP + n {
        let think_until = Instant::now() + Duration::from_nanos(think_ns);
        while Instant::now() < think_until {
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let v = ((m % 1024) as f32).to_bits() as u64 | (u64::from(m + 1) << 32);
        let slot = (m % SLOTS) as usize * WORDS as usize;
        for copy in 0..copies as usize {
            for i in 0..WORDS as usize {
                word(copy * ring, slot + i).store(v, Ordering::Release);
            }
        }
        let until = start + WAIT;
        let mut bad = false;
        for i in (0..WORDS as usize).rev() {
            let mut polls = 0u32;
            let v = loop {
                let v = word(out_at, slot + i).load(Ordering::Acquire);
                if (v >> 32) as u32 == m + 1 {
                    break Some(v);
                }
                polls = polls.wrapping_add(1);
                if polls.is_multiple_of(256) && Instant::now() > until {
                    break None;
                }
                std::hint::spin_loop();
            };
            match v {
                Some(v) => bad |= f32::from_bits(v as u32) != want(m),
                None => {
                    result = Err(format!("message {m}: no answer within 2 s"));
                    break;
                }
            }
        }
        let t = start.elapsed().as_nanos() as u64;
        if bad {
            result = Err(format!("message {m}: a wrong answer"));
        }
        if result.is_err() {
            break;
        }
        if m >= WARMUP {
            times.push(t);
        }
    }
    word(control_at, 0).store(1 << 32, Ordering::Release); // should_terminate (bytes 4..8)
    gpu.wait()?;
    result.map(|()| times)
}

/// `n` round trips then `b` batches of `SLOTS` messages, each after `WARMUP` untimed ones.
fn run(
    n: u32,
    b: u32,
    exchange: &mut dyn FnMut(u32, u32) -> Result<u64, String>,
) -> Result<Times, String> {
    let mut next = 0u32;
    let mut rtt = Vec::new();
    for i in 0..WARMUP + n {
        let t = exchange(next, 1)?;
        next += 1;
        if i >= WARMUP {
            rtt.push(t);
        }
    }
    let mut batches = Vec::new();
    for i in 0..WARMUP + b {
        let t = exchange(next, SLOTS)?;
        next += SLOTS;
        if i >= WARMUP {
            batches.push(t);
        }
    }
    Ok(Times { rtt, batches })
}

/// Launch + sync of `actor_scale` as a normal kernel over one message in device memory.
fn launch_sync(gpu: &Gpu, n: u32) -> Result<Vec<u64>, String> {
    let mut buf = 0;
    unsafe {
        ok(
            "cuMemAlloc",
            sys::cuMemAlloc_v2(&mut buf, HANDLER_BYTES as usize),
        )?
    };
    let control = handler_control();
    let s = gpu.stream;
    let (mut a, mut o, mut c, mut f) = (buf + IN_AT, buf + OUT_AT, buf + CONTROL_AT, FACTOR);
    let mut args: [*mut c_void; 4] = [
        (&mut a as *mut u64).cast(),
        (&mut o as *mut u64).cast(),
        (&mut c as *mut u64).cast(),
        (&mut f as *mut f32).cast(),
    ];
    let mut rings = Vec::new();
    let mut answer = vec![0u8; MESSAGE_BYTES as usize];
    let mut times = Vec::new();
    for k in 0..WARMUP + n {
        handler_rings(k, &mut rings);
        unsafe {
            ok(
                "writing the control block",
                sys::cuMemcpyHtoD_v2(buf + CONTROL_AT, control.as_ptr().cast(), control.len()),
            )?;
            ok(
                "writing the message",
                sys::cuMemcpyHtoD_v2(buf, rings.as_ptr().cast(), rings.len()),
            )?;
        }
        let start = Instant::now();
        gpu.launch(gpu.scale, THREADS, &mut args)?;
        unsafe { ok("cuStreamSynchronize", sys::cuStreamSynchronize(s))? };
        let t = start.elapsed().as_nanos() as u64;
        unsafe {
            ok(
                "reading the answer",
                sys::cuMemcpyDtoH_v2(answer.as_mut_ptr().cast(), buf + ANSWER_AT, answer.len()),
            )?;
        }
        if f32::from_le_bytes([answer[0], answer[1], answer[2], answer[3]]) != want(k) {
            return Err(format!("launch {k}: a wrong answer"));
        }
        if k >= WARMUP {
            times.push(t);
        }
    }
    Ok(times)
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1] as f64 / 1000.0
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let b: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    if !unsafe { sys::is_culib_present() } {
        println!("skipped: no CUDA device (libcuda is not installed)");
        return;
    }
    let gpu = match Gpu::new() {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("skipped: no CUDA device ({e})");
            return;
        }
    };
    let mut ls = match launch_sync(&gpu, n) {
        Ok(t) => t,
        Err(e) => {
            println!("error: launch + sync: {e}");
            std::process::exit(1);
        }
    };
    let ls50 = pct(&mut ls, 50.0);
    println!("{n} round trips, {b} batches of {SLOTS} messages of {MESSAGE_BYTES} bytes");
    println!(
        "launch + sync of the handler as a normal kernel: p50 {ls50:.2} µs, p99 {:.2} µs",
        pct(&mut ls, 99.0)
    );
    println!("| way | round trip p50 | p99 | ÷ launch + sync | batch p50 | messages/s |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    type Way<'a> = (&'a str, Box<dyn Fn() -> Result<Times, String> + 'a>);
    let ways: Vec<Way> = vec![
        (
            "head and slots (actor_scale, 256 threads)",
            Box::new(|| product_rings(&gpu, Product::Plain, n, b, 0)),
        ),
        (
            "self-validating, 64 threads, 1 message in flight",
            Box::new(|| self_validating(&gpu, n, b, 64, 1, false)),
        ),
        (
            "self-validating, 256 threads, 16 in flight each",
            Box::new(|| self_validating(&gpu, n, b, 256, 16, false)),
        ),
        (
            "self-validating, 256 threads, 16 in flight, fenced",
            Box::new(|| self_validating(&gpu, n, b, 256, 16, true)),
        ),
    ];
    let mut failed = false;
    for round in 0..2 {
        for (name, way) in &ways {
            match way() {
                Ok(mut t) => {
                    let (r50, r99) = (pct(&mut t.rtt, 50.0), pct(&mut t.rtt, 99.0));
                    let b50 = pct(&mut t.batches, 50.0);
                    println!(
                        "| {name} (round {}) | {r50:.2} µs | {r99:.2} µs | {:.2}× | {b50:.1} µs | {:.2} M |",
                        round + 1,
                        r50 / ls50,
                        f64::from(SLOTS) / b50,
                    );
                }
                Err(e) => {
                    println!("| {name} | error: {e} |");
                    failed = true;
                }
            }
        }
    }
    // The product's sequenced rings under its kernel and variants of it.
    let think = [0u64, 300, 700, 1500];
    let variants: [(&str, Product); 15] = [
        ("actor_scale_seq", Product::Sequenced),
        (
            "flags 0 (the pass before 9e435db)",
            Product::SequencedFlags(0),
        ),
        ("head behind tail fixed (128)", Product::SequencedFlags(128)),
        ("128 + lazy tail (2)", Product::SequencedFlags(130)),
        ("128 + no fence (4)", Product::SequencedFlags(132)),
        ("128 + no end barrier (8)", Product::SequencedFlags(136)),
        ("128 + 2 + 8", Product::SequencedFlags(138)),
        ("no head read (1)", Product::SequencedFlags(1)),
        ("1 + 2 + 4 + 8", Product::SequencedFlags(15)),
        ("watcher warp (16) + 128 + 8", Product::SequencedFlags(152)),
        (
            "head after a full pass (64) + 128 + 8 (9e435db)",
            Product::SequencedFlags(200),
        ),
        (
            "64 + 128 + 8 + a window twice the last pass's (256)",
            Product::SequencedFlags(456),
        ),
        ("64 + 128 + 2 + 8", Product::SequencedFlags(202)),
        (
            "256 + 64 + 128 + 8 + no fence (4)",
            Product::SequencedFlags(460),
        ),
        ("256 + 64 + 128 + 8 + 4 + 2", Product::SequencedFlags(462)),
    ];
    println!();
    println!("sequenced rings: round trips p50 / p99 in µs by the client's spin before each message; batches of {SLOTS}, messages/s (M):");
    print!("| kernel |");
    for t in think {
        print!(" {t} ns |");
    }
    println!(" batches |");
    println!("| --- |{} ---: |", " ---: |".repeat(think.len()));
    for round in 0..2 {
        for (name, kernel) in variants {
            print!("| {name} (round {}) |", round + 1);
            let mut rate = String::new();
            for (i, t) in think.into_iter().enumerate() {
                let batches = if i == 0 { b } else { 0 };
                match product_rings(&gpu, kernel, n.min(5_000), batches, t) {
                    Ok(mut v) => {
                        print!(
                            " {:.2} / {:.2} |",
                            pct(&mut v.rtt, 50.0),
                            pct(&mut v.rtt, 99.0)
                        );
                        if i == 0 && !v.batches.is_empty() {
                            rate = format!("{:.2}", f64::from(SLOTS) / pct(&mut v.batches, 50.0));
                        }
                    }
                    Err(e) => {
                        print!(" error: {e} |");
                        failed = true;
                    }
                }
            }
            println!(" {rate} |");
        }
    }

    // Replicated slots: the wait of a message that lands just after a read was served.
    let replicas: [(u32, u32); 5] = [(1, 0), (2, 600), (4, 300), (4, 450), (8, 150)];
    println!();
    println!("replicated slots (actor_llc, round trips p50 / p99 in µs), by the client's spin before each message:");
    print!("| copies, stagger |");
    for t in think {
        print!(" {t} ns |");
    }
    println!();
    println!("| --- |{}", " ---: |".repeat(think.len()));
    for round in 0..2 {
        for (copies, stagger) in replicas {
            print!("| {copies}, {stagger} ns (round {}) |", round + 1);
            for t in think {
                match replicated(&gpu, n.min(5_000), copies, stagger, t) {
                    Ok(mut v) => print!(" {:.2} / {:.2} |", pct(&mut v, 50.0), pct(&mut v, 99.0)),
                    Err(e) => {
                        print!(" error: {e} |");
                        failed = true;
                    }
                }
            }
            println!();
        }
    }
    if failed {
        std::process::exit(1);
    }
}
