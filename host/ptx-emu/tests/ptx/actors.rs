//! What persistent kernels need of the emulator: host memory mapped as an allocation
//! (`DeviceMemory::map_external`), fences and ordered accesses that a kernel and its host
//! synchronise through, `nanosleep`, and the actor kernels of kernels/actor.cu served by a host
//! thread through rings in mapped memory while they run.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, LaunchStats, MemError, Module};

const HEAD: &str = ".version 8.5\n.target sm_80\n.address_size 64\n";

/// Host memory for the tests to map: 256-aligned, zeroed.
#[repr(C, align(256))]
struct Area([u8; AREA]);
const AREA: usize = 16 << 10;

fn area() -> Box<Area> {
    Box::new(Area([0; AREA]))
}

fn word(base: *mut u8, off: usize) -> &'static AtomicU32 {
    // SAFETY (for the tests): `base + off` is 4-aligned inside an area that outlives every use.
    unsafe { AtomicU32::from_ptr(base.add(off).cast()) }
}

#[test]
fn mapped_host_memory_is_an_allocation_whose_stores_the_host_sees() {
    let mem = DeviceMemory::new();
    let mut host = area();
    let base = host.0.as_mut_ptr();
    // SAFETY: the area outlives the mapping and every launch; only atomics touch it meanwhile.
    let addr = unsafe { mem.map_external(base, 4096) }.unwrap();
    assert_eq!(addr % 256, 0);
    let m = module("iota");
    launch(
        &m,
        &mem,
        "iota",
        [4, 1, 1],
        [256, 1, 1],
        &[A::U64(addr), A::U32(1024)],
    )
    .unwrap();
    for i in [0usize, 1, 500, 1023] {
        assert_eq!(word(base, i * 4).load(Ordering::Relaxed), i as u32 + 1);
    }
    // The host's stores are the device's memory too, and copies work on it as on any allocation.
    word(base, 8).store(77, Ordering::Relaxed);
    assert_eq!(download_u32(&mem, addr + 8, 1), vec![77]);
    let other = upload_u32(&mem, &[5, 6]);
    mem.copy(addr + 16, other, 8).unwrap();
    assert_eq!(word(base, 20).load(Ordering::Relaxed), 6);
    // Exactly `len` bytes: one word past them faults.
    let e = launch(
        &m,
        &mem,
        "iota",
        [5, 1, 1],
        [256, 1, 1],
        &[A::U64(addr), A::U32(1025)],
    );
    assert!(
        matches!(&e, Err(ExecError::Fault { message, .. }) if message.contains("out-of-bounds")),
        "{e:?}"
    );
    // Freeing forgets the memory without freeing it: the host still owns (and later frees) it.
    mem.free(addr).unwrap();
    assert!(matches!(
        mem.read(addr, &mut [0u8; 4]),
        Err(MemError::OutOfBounds { .. })
    ));
    assert_eq!(word(base, 0).load(Ordering::Relaxed), 1);
    let again = unsafe { mem.map_external(base, AREA as u64) }.unwrap();
    assert_ne!(again, addr, "addresses are never reused");
    mem.clear();
    assert_eq!(word(base, 4).load(Ordering::Relaxed), 2);
}

#[test]
fn mapping_refuses_what_kernels_could_not_use() {
    let mem = DeviceMemory::new();
    let mut host = area();
    let base = host.0.as_mut_ptr();
    let refused = |r: Result<u64, MemError>, why: &str| match r {
        Err(MemError::AllocFailed { reason, .. }) => assert!(reason.contains(why), "{reason}"),
        other => panic!("{other:?}"),
    };
    // SAFETY: none of these is mapped; the area outlives the calls.
    unsafe {
        refused(mem.map_external(base, 0), "zero");
        refused(mem.map_external(base.add(4), 64), "8-byte-aligned");
        refused(mem.map_external(std::ptr::null_mut(), 64), "non-null");
        refused(mem.map_external(base, (1 << 40) + 1), "1 TiB");
    }
}

/// Runs `body` as kernel `k(.param .u64 out, .param .u64 data, .param .u32 t)` of `grid` CTAs of
/// 32 threads, each CTA on a thread of its own.
fn run_hand(body: &str, grid: u32, vals: &[A]) -> Result<LaunchStats, ExecError> {
    let src = format!(
        "{HEAD}.visible .entry k(.param .u64 out, .param .u64 data, .param .u32 t)\n{{\n.reg .pred %p<8>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\nld.param.u64 %rd1, [out];\nld.param.u64 %rd2, [data];\nld.param.u32 %r20, [t];\nmov.u32 %r0, %tid.x;\nmov.u32 %r1, %ctaid.x;\n{body}\nret;\n}}\n"
    );
    let m = Module::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let mem = DeviceMemory::new();
    launch_full(
        &m,
        &mem,
        "k",
        [grid, 1, 1],
        [32, 1, 1],
        0,
        vals,
        1 << 40,
        grid as usize,
    )
}

#[test]
fn fences_and_ordered_accesses_publish_one_ctas_stores_to_another() {
    let mem = DeviceMemory::new();
    let data = mem.alloc(32 * 4 + 8).unwrap();
    let out = mem.alloc(32 * 4).unwrap();
    // CTA 0 writes 32 words, fences every way PTX spells it, then raises a flag with a release
    // store; CTA 1 waits for the flag with acquire and volatile loads (sleeping between polls),
    // then copies the words. Every form must load; the copy must be whole.
    let body = "
        mul.wide.u32 %rd3, %r0, 4;
        add.s64 %rd4, %rd2, %rd3;
        add.s64 %rd5, %rd1, %rd3;
        setp.ne.u32 %p1, %r1, 0;
        @%p1 bra CONSUMER;
        add.u32 %r2, %r0, 1000;
        st.global.u32 [%rd4], %r2;
        membar.gl;
        membar.sys;
        fence.sc.gpu;
        fence.acq_rel.sys;
        fence.sc.cta;
        setp.ne.u32 %p2, %r0, 0;
        @%p2 bra DONE;
        st.release.gpu.global.u32 [%rd2+128], 1;
        st.volatile.global.u32 [%rd2+132], 1;
        atom.acq_rel.gpu.global.add.u32 %r3, [%rd2+132], 1;
        bra.uni DONE;
    CONSUMER:
        ld.acquire.gpu.global.u32 %r4, [%rd2+128];
        ld.volatile.global.u32 %r5, [%rd2+132];
        setp.eq.u32 %p3, %r4, 0;
        @%p3 nanosleep.u32 0;
        @%p3 bra CONSUMER;
        ld.relaxed.sys.global.u32 %r6, [%rd4];
        st.global.u32 [%rd5], %r6;
    DONE:";
    let src = format!(
        "{HEAD}.visible .entry k(.param .u64 out, .param .u64 data)\n{{\n.reg .pred %p<8>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\nld.param.u64 %rd1, [out];\nld.param.u64 %rd2, [data];\nmov.u32 %r0, %tid.x;\nmov.u32 %r1, %ctaid.x;\n{body}\nret;\n}}\n"
    );
    let m = Module::parse(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    for _ in 0..20 {
        mem.write(data, &[0u8; 32 * 4 + 8]).unwrap();
        launch_full(
            &m,
            &mem,
            "k",
            [2, 1, 1],
            [32, 1, 1],
            0,
            &[A::U64(out), A::U64(data)],
            1 << 40,
            2,
        )
        .unwrap();
        let got = download_u32(&mem, out, 32);
        assert_eq!(got, (1000..1032).collect::<Vec<u32>>());
        assert_eq!(download_u32(&mem, data + 132, 1), vec![2]);
    }
}

#[test]
fn nanosleep_sleeps_at_most_a_millisecond_each() {
    // Thread 0 sleeps `t` ns four times; `t` past 1 ms sleeps 1 ms.
    let body = "
        setp.ne.u32 %p1, %r0, 0;
        @%p1 bra DONE;
        nanosleep.u32 %r20;
        nanosleep.u32 %r20;
        nanosleep.u32 %r20;
        nanosleep.u32 %r20;
    DONE:";
    let timed = |t: u32| {
        let began = Instant::now();
        let stats = run_hand(body, 1, &[A::U64(0), A::U64(0), A::U32(t)]).unwrap();
        (began.elapsed(), stats.lane_instructions)
    };
    let (capped, steps) = timed(u32::MAX);
    assert!(
        capped >= Duration::from_millis(4) && capped < Duration::from_millis(500),
        "{capped:?}"
    );
    let (_, steps_zero) = timed(0);
    assert_eq!(
        steps, steps_zero,
        "a sleep is one step per lane, however long"
    );
    // An immediate delay loads too.
    run_hand("nanosleep.u32 1000;", 1, &[A::U64(0), A::U64(0), A::U32(0)]).unwrap();
}

/// A ring of actor.rs's layout in host memory: the host's side of it.
#[derive(Clone, Copy)]
struct HostRing {
    base: *mut u8,
    capacity: u32,
    message_size: u32,
}

// SAFETY: accessed only through atomics; the memory outlives the tests' threads (leaked).
unsafe impl Send for HostRing {}

impl HostRing {
    fn create(base: *mut u8, capacity: u32, message_size: u32) -> HostRing {
        word(base, 0).store(0, Ordering::Relaxed);
        word(base, 64).store(0, Ordering::Relaxed);
        word(base, 128).store(capacity, Ordering::Relaxed);
        word(base, 132).store(message_size, Ordering::Release);
        HostRing {
            base,
            capacity,
            message_size,
        }
    }

    fn slot(&self, n: u32, w: usize) -> &'static AtomicU32 {
        let slot = (n & (self.capacity - 1)) as usize;
        word(self.base, 256 + slot * self.message_size as usize + w * 4)
    }

    /// Puts as many of `msgs` as fit; how many.
    fn push(&self, msgs: &[Vec<f32>]) -> usize {
        let head = word(self.base, 0).load(Ordering::Relaxed);
        let tail = word(self.base, 64).load(Ordering::Acquire);
        let n = msgs
            .len()
            .min((self.capacity - head.wrapping_sub(tail)) as usize);
        for (i, m) in msgs[..n].iter().enumerate() {
            for (w, x) in m.iter().enumerate() {
                self.slot(head + i as u32, w)
                    .store(x.to_bits(), Ordering::Relaxed);
            }
        }
        word(self.base, 0).store(head + n as u32, Ordering::Release);
        n
    }

    /// Takes every waiting message.
    fn pop(&self, out: &mut Vec<Vec<f32>>) {
        let head = word(self.base, 0).load(Ordering::Acquire);
        let tail = word(self.base, 64).load(Ordering::Relaxed);
        let n = head.wrapping_sub(tail);
        assert!(n <= self.capacity, "broken ring: head {head} tail {tail}");
        for i in 0..n {
            out.push(
                (0..self.message_size as usize / 4)
                    .map(|w| f32::from_bits(self.slot(tail + i, w).load(Ordering::Relaxed)))
                    .collect(),
            );
        }
        word(self.base, 64).store(head, Ordering::Release);
    }
}

/// An actor kernel of kernels/actor.cu running on a thread of its own, over leaked memory (a
/// kernel that never ends must not outlive what it uses).
struct Actor {
    inbox: HostRing,
    outbox: HostRing,
    control: *mut u8,
    done: std::thread::JoinHandle<Result<LaunchStats, ExecError>>,
}

const FLOATS: usize = 16;

fn start_actor(kernel: &'static str) -> Actor {
    let mem: &'static DeviceMemory = Box::leak(Box::new(DeviceMemory::new()));
    let host: &'static mut Area = Box::leak(area());
    let base = host.0.as_mut_ptr();
    // SAFETY: leaked, so mapped for good; only atomics touch it.
    let dev = unsafe { mem.map_external(base, AREA as u64) }.unwrap();
    let (inbox_off, outbox_off, control_off) = (0usize, 4096usize, 8192usize);
    let inbox = HostRing::create(base, 16, (FLOATS * 4) as u32);
    // SAFETY: inside the leaked area.
    let outbox = HostRing::create(unsafe { base.add(outbox_off) }, 8, (FLOATS * 4) as u32);
    let control = unsafe { base.add(control_off) };
    let m = Arc::new(module("actor"));
    let a = args(
        kinfo(&m, kernel),
        &[
            A::U64(dev + inbox_off as u64),
            A::U64(dev + outbox_off as u64),
            A::U64(dev + control_off as u64),
            A::F32(2.0),
        ],
    );
    let done = std::thread::spawn(move || {
        m.launch(
            kernel,
            mem,
            &LaunchParams {
                grid: [1, 1, 1],
                block: [64, 1, 1],
                shared_mem_bytes: 0,
                args: &a,
                step_limit: u64::MAX,
                threads: 1,
            },
        )
    });
    Actor {
        inbox,
        outbox,
        control,
        done,
    }
}

impl Actor {
    /// Asks the kernel to return and waits (bounded) for it.
    fn stop(self) -> Result<LaunchStats, ExecError> {
        word(self.control, 4).store(1, Ordering::Release);
        self.wait()
    }

    fn wait(self) -> Result<LaunchStats, ExecError> {
        let began = Instant::now();
        while !self.done.is_finished() {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "the actor did not return"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.done.join().unwrap()
    }

    fn messages_processed(&self) -> u64 {
        // SAFETY: 8-aligned inside the leaked area.
        unsafe { AtomicU64::from_ptr(self.control.add(16).cast()) }.load(Ordering::Acquire)
    }
}

fn message(i: usize) -> Vec<f32> {
    (0..FLOATS).map(|w| (i * FLOATS + w) as f32).collect()
}

#[test]
fn an_actor_serves_messages_through_mapped_rings_until_asked_to_stop() {
    let actor = start_actor("actor_scale");
    let total = 300;
    let msgs: Vec<Vec<f32>> = (0..total).map(message).collect();
    let (mut sent, mut got) = (0, Vec::new());
    let began = Instant::now();
    while got.len() < total {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "{} of {total} answered",
            got.len()
        );
        sent += actor.inbox.push(&msgs[sent..]);
        actor.outbox.pop(&mut got);
        std::thread::yield_now();
    }
    for (i, out) in got.iter().enumerate() {
        let want: Vec<f32> = message(i).iter().map(|x| x.mul_add(2.0, 1.0)).collect();
        assert_eq!(out, &want, "message {i}");
    }
    assert_eq!(actor.messages_processed(), total as u64);
    actor.stop().unwrap();
}

#[test]
fn an_actor_whose_handler_faults_ends_with_the_fault_and_its_line() {
    let actor = start_actor("actor_fault");
    actor.inbox.push(&[message(1)]);
    let began = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(began.elapsed() < Duration::from_secs(20));
        actor.outbox.pop(&mut got);
        std::thread::yield_now();
    }
    let mut bad = message(0);
    bad[0] = -1.0;
    actor.inbox.push(&[bad]);
    let e = actor.wait().unwrap_err();
    // The only stores through a generic pointer in actor_fault are the handler's bad one (one
    // per way the kernel transforms a batch: 16 bytes or 4 bytes a load).
    let src = kernel_src("actor");
    let start = src.find(".entry actor_fault").unwrap();
    let end = start + src[start..].find("\n}").unwrap();
    let first = src[..start].lines().count();
    let lines: Vec<usize> = src[start..end]
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("st.volatile.u32"))
        .map(|(i, _)| first + i)
        .collect();
    assert!(!lines.is_empty());
    match e {
        ExecError::Fault { site, message } => {
            assert!(
                lines.contains(&(site.line as usize)),
                "{lines:?}: {message}"
            );
            assert!(message.contains("out-of-bounds global write"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
