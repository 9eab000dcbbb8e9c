//! Persistent kernels on emu worker processes: kernels/actor.cu's actors serving rings in a
//! mapped area that this process and the worker both map, beside the worker's other work; how
//! they end (asked, faulted, or not at all), and what the worker refuses while one runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{emu_worker, iota_args, kernel_source};
use crate::support::*;
use tasklet_worker::contract::actor::{
    ring_bytes, ControlBlock, Exit, Ring, RingLayout, CONTROL_BYTES,
};
use tasklet_worker::guest_memory::SharedMemory;
use tasklet_worker::host::mapped::MappedArea;
use tasklet_worker::{
    ErrorKind, Launch, LoadedModule, Worker, EMU_MAX_DEVICE_MAPPINGS, EMU_MAX_RESIDENT_CTAS,
    MAX_MODULE_TEXT_BYTES,
};

/// Floats in one message.
const FLOATS: usize = 16;
const MESSAGE: u32 = (FLOATS * 4) as u32;
/// Every wait of these tests ends by then.
const BOUND: Duration = Duration::from_secs(30);

/// An area with an inbox, an outbox and a control block, mapped for the worker's kernels.
struct Actor {
    area: Arc<MappedArea>,
    /// Device address of the area's start.
    dev: u64,
    inbox: (usize, Ring),
    outbox: (usize, Ring),
    control: usize,
    module: LoadedModule,
}

impl Actor {
    fn new(w: &mut Worker, capacity: u32) -> Actor {
        let area = Arc::new(MappedArea::create(64 << 10).unwrap());
        let dev = w.map_device(&area.whole()).unwrap();
        let ring = |area: &MappedArea| {
            let bytes = ring_bytes(RingLayout::Plain, capacity, MESSAGE).unwrap();
            let off = area.take(bytes).unwrap();
            // SAFETY: a fresh 256-aligned piece of `bytes`, kept mapped by the Arc.
            (off, unsafe {
                Ring::create(area.host_ptr(off), RingLayout::Plain, capacity, MESSAGE)
            })
        };
        let inbox = ring(&area);
        let outbox = ring(&area);
        let control = area.take(CONTROL_BYTES).unwrap();
        let module = w.load_module(&kernel_source("actor")).unwrap();
        Actor {
            area,
            dev,
            inbox,
            outbox,
            control,
            module,
        }
    }

    fn control(&self) -> ControlBlock {
        // SAFETY: a piece of the area, which `self` keeps mapped.
        unsafe { ControlBlock::at(self.area.host_ptr(self.control)) }
    }

    /// The argument block of `kernel` (actor_scale, actor_fault: the rings, the block, 2.0;
    /// actor_deaf: the block).
    fn args(&self, kernel: &str) -> Vec<u8> {
        let k = &self.module.kernels[kernel_index(&self.module, kernel) as usize];
        let (offsets, size) = k.param_layout();
        let mut args = vec![0u8; size as usize];
        let mut put = |i: usize, bytes: &[u8]| {
            args[offsets[i] as usize..][..bytes.len()].copy_from_slice(bytes)
        };
        let control = self.dev + self.control as u64;
        if kernel == "actor_deaf" {
            put(0, &control.to_le_bytes());
        } else {
            put(0, &(self.dev + self.inbox.0 as u64).to_le_bytes());
            put(1, &(self.dev + self.outbox.0 as u64).to_le_bytes());
            put(2, &control.to_le_bytes());
            put(3, &2.0f32.to_le_bytes());
        }
        args
    }

    fn launch<'a>(&self, kernel: &str, grid: u32, args: &'a [u8]) -> Launch<'a> {
        Launch {
            module: self.module.id,
            kernel: kernel_index(&self.module, kernel),
            grid: [grid, 1, 1],
            block: [64, 1, 1],
            shared_mem_bytes: 0,
            args,
            // Ignored for a persistent kernel: it runs longer than this.
            deadline: Duration::from_millis(1),
        }
    }

    fn start(
        &self,
        w: &mut Worker,
        kernel: &str,
        grid: u32,
    ) -> Result<(), tasklet_worker::WorkerError> {
        let args = self.args(kernel);
        w.launch_persistent(&self.launch(kernel, grid, &args), &self.area, self.control)
    }

    /// Waits (bounded) for the control block to say the kernel ended; how.
    fn ended(&self, within: Duration) -> Option<Exit> {
        eventually(within, || self.control().ended()).then(|| self.control().snapshot().exit)
    }
}

fn message(i: usize) -> Vec<u8> {
    (0..FLOATS)
        .flat_map(|w| ((i * FLOATS + w) as f32).to_le_bytes())
        .collect()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Sends `msgs` through the actor (as many at once as the inbox takes) and returns every answer.
fn exchange(a: &Actor, msgs: &[Vec<u8>]) -> Vec<u8> {
    let all: Vec<u8> = msgs.concat();
    let (mut sent, mut got) = (0usize, Vec::new());
    let began = Instant::now();
    while got.len() < all.len() {
        assert!(
            began.elapsed() < BOUND,
            "{} of {} answers",
            got.len() / MESSAGE as usize,
            msgs.len()
        );
        sent += a.inbox.1.push(&all[sent..]).unwrap() as usize * MESSAGE as usize;
        if a.outbox.1.pop(u32::MAX, &mut got).unwrap() == 0 {
            std::thread::yield_now();
        }
    }
    got
}

#[test]
fn an_actor_serves_messages_beside_normal_launches_until_asked_to_stop() {
    let mut w = emu_worker(64 << 20);
    let a = Actor::new(&mut w, 64);
    // Loaded first: no module loads beside a persistent kernel (on every backend).
    let iota = w.load_module(&kernel_source("iota")).unwrap();
    a.start(&mut w, "actor_scale", 1).unwrap();
    let s = a.control().snapshot();
    assert!(s.is_active && !s.has_terminated && s.exit == Exit::Running);

    // A normal launch and its sync go on while the actor runs: sync does not wait for it.
    let out = w.alloc(1024 * 4).unwrap();
    let args = iota_args(&iota.kernels[0], out, 1024);
    let began = Instant::now();
    w.launch(&Launch {
        module: iota.id,
        kernel: kernel_index(&iota, "iota"),
        grid: [8, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        deadline: Duration::from_secs(10),
    })
    .unwrap();
    w.sync().unwrap();
    assert!(began.elapsed() < Duration::from_secs(10));
    let mut back = vec![0u8; 1024 * 4];
    w.read(out, &mut back).unwrap();
    assert_eq!(u32::from_le_bytes(back[4092..].try_into().unwrap()), 1024);

    // 1000 messages in batches of 50 (the inbox holds 64).
    let total = 1000;
    let msgs: Vec<Vec<u8>> = (0..total).map(message).collect();
    let began = Instant::now();
    let mut got = Vec::new();
    for batch in msgs.chunks(50) {
        got.extend(exchange(&a, batch));
    }
    let batched = began.elapsed();
    for (i, answer) in got.chunks(MESSAGE as usize).enumerate() {
        let want: Vec<f32> = floats(&message(i))
            .iter()
            .map(|x| x.mul_add(2.0, 1.0))
            .collect();
        assert_eq!(floats(answer), want, "message {i}");
    }
    assert_eq!(a.control().snapshot().messages_processed, total as u64);

    // One message at a time: the round trip.
    let mut trips: Vec<Duration> = (0..200)
        .map(|i| {
            let t = Instant::now();
            exchange(&a, &[message(i)]);
            t.elapsed()
        })
        .collect();
    trips.sort();
    eprintln!(
        "emu actor: {total} messages in batches of 50 in {batched:?} ({:.0} messages/s); \
         round trip p50 {:?}, p99 {:?}",
        total as f64 / batched.as_secs_f64(),
        trips[trips.len() / 2],
        trips[trips.len() * 99 / 100]
    );

    // What the kernel may be using stays while it runs.
    assert_eq!(op_kind(w.unmap_device(a.dev)), ErrorKind::InvalidArgument);
    let other = SharedMemory::create(1 << 20, 1 << 20, 0).unwrap();
    w.map_device(&span(&other, 0, 4096)).unwrap();
    drop(other);
    // The next attach first detaches the dropped memory: refused while the actor runs.
    let third = SharedMemory::create(1 << 20, 1 << 20, 0).unwrap();
    let (kind, message) = op_error(w.map_device(&span(&third, 0, 4096)));
    assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
    assert!(message.contains("persistent kernel"), "{message}");

    let gpu_before_end = w.gpu_time();
    let ran = a.control();
    assert!(w.stop_persistent(BOUND), "the actor did not stop");
    let s = ran.snapshot();
    assert_eq!(s.exit, Exit::Returned);
    assert!(s.has_terminated && !s.is_active && s.should_terminate);
    assert_eq!(s.messages_processed, total as u64 + 200);
    // Its wall time is the worker's GPU time (counted as it ran, and to its end).
    w.ping().unwrap();
    assert!(
        w.gpu_time() >= gpu_before_end.max(batched),
        "{:?}",
        w.gpu_time()
    );
    // Once it has ended, the memory may go and the worker is reusable.
    w.unmap_device(a.dev).unwrap();
    assert_eq!(op_kind(w.unmap_device(a.dev)), ErrorKind::InvalidArgument);
    w.reset().unwrap();
    assert!(!w.is_poisoned());
    w.ping().unwrap();
}

#[test]
fn an_actor_whose_handler_faults_says_where_in_its_control_block() {
    let mut w = emu_worker(64 << 20);
    let a = Actor::new(&mut w, 16);
    a.start(&mut w, "actor_fault", 1).unwrap();
    assert_eq!(exchange(&a, &[message(3)]).len(), MESSAGE as usize);
    let mut bad = message(0);
    bad[..4].copy_from_slice(&(-1.0f32).to_le_bytes());
    assert_eq!(a.inbox.1.push(&bad).unwrap(), 1);
    match a.ended(BOUND) {
        Some(Exit::Faulted(m)) => {
            assert!(m.contains("PTX line") && m.contains("out-of-bounds"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    let s = a.control().snapshot();
    assert!(s.has_terminated && !s.is_active);
    assert_eq!(s.messages_processed, 1);
    // As on a GPU, whose context a fault leaves unusable: the worker still answers a ping, and
    // its next op reports the fault, naming the persistent kernel; the worker is done.
    w.ping().unwrap();
    // The status block the host reads is written just after the control block says it ended.
    assert!(
        eventually(Duration::from_secs(5), || w.persistent_running() == 0),
        "the ended kernel is still listed as running"
    );
    let (kind, message) = op_error(w.sync());
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(
        message.contains("persistent kernel `actor_fault` faulted") && message.contains("PTX line"),
        "{message}"
    );
    assert!(w.is_poisoned());
}

/// A worker whose actor faulted after `iota` (a shared module) was loaded: the fault is held
/// for the worker's next op.
fn faulted_beside_a_shared_module() -> (Worker, String) {
    let mut w = emu_worker(64 << 20);
    let iota = kernel_source("iota");
    w.load_module(&iota).unwrap();
    let a = Actor::new(&mut w, 16);
    a.start(&mut w, "actor_fault", 1).unwrap();
    let mut bad = message(0);
    bad[..4].copy_from_slice(&(-1.0f32).to_le_bytes());
    assert_eq!(a.inbox.1.push(&bad).unwrap(), 1);
    assert!(
        matches!(a.ended(BOUND), Some(Exit::Faulted(_))),
        "the actor faults"
    );
    // The host sees it ended from the worker's status block, written just after.
    assert!(eventually(BOUND, || w.persistent_running() == 0));
    (w, iota)
}

/// A repeated load of a shared module is the worker's to answer once a persistent kernel was
/// seen ended since its last answer (it may have faulted), and still after a ping, which the
/// worker answers without reporting such a fault: it reports the fault.
#[test]
fn a_repeated_load_after_an_actor_faulted_reports_the_fault() {
    let (mut w, iota) = faulted_beside_a_shared_module();
    let (kind, message) = op_error(w.load_module(&iota));
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(message.contains("actor_fault"), "{message}");

    let (mut w, iota) = faulted_beside_a_shared_module();
    w.ping().unwrap();
    let (kind, message) = op_error(w.load_module(&iota));
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(message.contains("actor_fault"), "{message}");
}

#[test]
fn an_actor_that_ignores_termination_keeps_its_worker_from_being_reused() {
    let mut w = emu_worker(64 << 20);
    let pid = w.pid();
    let a = Actor::new(&mut w, 16);
    a.start(&mut w, "actor_deaf", 1).unwrap();
    let began = Instant::now();
    assert!(!w.stop_persistent(Duration::from_millis(500)));
    assert!(began.elapsed() >= Duration::from_millis(500));
    let s = a.control().snapshot();
    assert!(s.should_terminate && s.is_active && s.exit == Exit::Running);
    assert!(
        s.errors_encountered > 0,
        "the kernel sleeps and wakes: {s:?}"
    );
    let (kind, message) = op_error(w.reset());
    assert_eq!(kind, ErrorKind::KernelFault, "{message}");
    assert!(message.contains("cannot be reused"), "{message}");
    assert!(
        w.is_poisoned(),
        "a pool kills a poisoned worker instead of reusing it"
    );
    // Only ending the worker stops it.
    drop(w);
    wait_dead(pid);
}

#[test]
fn grids_past_the_co_residency_limit_are_refused_at_once() {
    let mut w = emu_worker(64 << 20);
    let a = Actor::new(&mut w, 16);
    let limit = EMU_MAX_RESIDENT_CTAS as u32;
    let began = Instant::now();
    let (kind, message) = op_error(a.start(&mut w, "actor_deaf", limit + 1));
    assert_eq!(kind, ErrorKind::LaunchFailed, "{message}");
    assert!(
        message.contains(&format!("EMU_MAX_RESIDENT_CTAS = {limit}")),
        "{message}"
    );
    assert!(began.elapsed() < Duration::from_secs(5));
    // Refused at once leaves the control block alone.
    let s = a.control().snapshot();
    assert!(!s.is_active && s.exit == Exit::Running);
    // The limit counts the blocks of every persistent kernel running.
    a.start(&mut w, "actor_deaf", limit).unwrap();
    let (kind, message) = op_error(a.start(&mut w, "actor_deaf", 1));
    assert_eq!(kind, ErrorKind::LaunchFailed, "{message}");
    assert!(message.contains(&format!("{limit} held")), "{message}");
    w.kill();
}

#[test]
fn a_worker_maps_a_bounded_number_of_areas_for_kernels() {
    let mut w = emu_worker(64 << 20);
    let mem = SharedMemory::create(1 << 20, 1 << 20, 0).unwrap();
    // Misaligned memory is refused, naming why.
    let (kind, message) = op_error(w.map_device(&span(&mem, 4, 256)));
    assert_eq!(kind, ErrorKind::InvalidArgument, "{message}");
    assert!(message.contains("8-byte-aligned"), "{message}");
    let mut addrs = Vec::new();
    for i in 0..EMU_MAX_DEVICE_MAPPINGS {
        addrs.push(w.map_device(&span(&mem, (i % 64) * 256, 256)).unwrap());
    }
    let (kind, message) = op_error(w.map_device(&span(&mem, 0, 256)));
    assert_eq!(kind, ErrorKind::OutOfMemory, "{message}");
    w.unmap_device(addrs[0]).unwrap();
    w.map_device(&span(&mem, 0, 256)).unwrap();
}

/// A kernel that writes into its own control block that it returned (exit, has_terminated,
/// is_active), then goes on running until it is asked to stop.
const LIAR_PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry actor_liar(.param .u64 ctl)
{
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    .reg .pred %p<2>;
    ld.param.u64 %rd0, [ctl];
    cvta.to.global.u64 %rd1, %rd0;
    st.volatile.global.u32 [%rd1+24], 1;
    st.volatile.global.u32 [%rd1+8], 1;
    st.volatile.global.u32 [%rd1+0], 0;
WAIT:
    nanosleep.u32 1000;
    ld.volatile.global.u32 %r0, [%rd1+4];
    setp.eq.u32 %p0, %r0, 0;
    @%p0 bra WAIT;
    ret;
}
"#;

/// The host believes the worker's status block, which no kernel can reach, about whether and how
/// a persistent kernel ended: one that writes "returned" into its own control block still runs,
/// still counts, and still has to be stopped.
#[test]
fn a_kernel_cannot_pretend_through_its_control_block_that_it_ended() {
    let mut w = emu_worker(64 << 20);
    let a = Actor::new(&mut w, 16);
    let liar = w.load_module(LIAR_PTX).unwrap();
    let control = a.dev + a.control as u64;
    let args = control.to_le_bytes();
    let launch = Launch {
        module: liar.id,
        kernel: 0,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem_bytes: 0,
        args: &args,
        deadline: Duration::from_millis(1),
    };
    w.launch_persistent(&launch, &a.area, a.control).unwrap();
    // The kernel's own block says what it wrote.
    assert!(
        eventually(BOUND, || a.control().snapshot().exit == Exit::Returned),
        "the kernel wrote its lie"
    );
    let view = w.persistent_view(&a.area, a.control).expect("a view of it");
    let s = view.block().snapshot();
    assert!(
        s.is_active && !s.has_terminated && s.exit == Exit::Running && !view.block().ended(),
        "the status block says it runs: {s:?}"
    );
    assert_eq!(w.persistent_running(), 1);
    // Asked, it returns, and then the status block says so.
    assert!(w.stop_persistent(BOUND));
    assert_eq!(view.block().snapshot().exit, Exit::Returned);
    assert_eq!(w.persistent_running(), 0);
    w.reset().unwrap();
}

/// A module unloaded while a persistent kernel ran is unloaded once none runs; when that
/// unload is answered with a failure held for the next call (a refused launch), the module
/// stays listed, is unloaded at the next chance, and no module or text is left held: after
/// every module the host knows of is unloaded, the worker holds none and a full 128 MiB of
/// distinct 4 MiB loads fits again.
#[test]
fn a_deferred_unload_answered_with_a_held_failure_is_tried_again() {
    const EACH: usize = 4 << 20;
    let padded = |tag: usize| padded_iota(tag, EACH);
    let mut w = emu_worker(64 << 20);
    let actor = Actor::new(&mut w, 8);
    let deferred = w.load_module(&padded(1)).unwrap();
    actor.start(&mut w, "actor_scale", 1).unwrap();
    w.unload_module(deferred.id).unwrap();
    // A launch the worker refuses (no such kernel), posted: its failure is held for the next
    // call, which is the deferred unload.
    post_refused_launch(&mut w, &actor.module);
    assert!(w.stop_persistent(BOUND));
    let after = w.load_module(&padded(2));
    assert!(after.is_err(), "the held failure is reported: {after:?}");
    w.unload_module(actor.module.id).unwrap();
    assert_eq!(w.info().unwrap().modules, 0, "a module was left loaded");
    for tag in 0..MAX_MODULE_TEXT_BYTES / EACH {
        w.load_module(&padded(100 + tag)).unwrap();
    }
}
