//! Persistent kernels ("actors") and their rings (contract 0.2, issue 20) through a tasklet's GPU
//! service on this node (`LocalGpu`) and through the probe tasklet (the SDK's `Ring` and `Actor`),
//! on the suite's backend: kernels/actor.cu's actors serve messages beside normal launches until
//! asked to stop; one that faults or will not stop tells its own tasklet only, ends its lease and
//! worker, and leaves the books at baseline; every limit and misuse is refused with a typed error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tasklet_runtime::config::Right;
use tasklet_runtime::gpu::{
    ActorArg, ActorId, ActorOp, ActorReply, ActorStatus, BufferId, GpuService, KernelArg,
    KernelRef, LaunchConfig, LeaseId, LeaseRequest, LocalGpu, ModuleId, RingDirection, RingId,
    RingLayout, SessionId, MAX_LEASE_MAPPED_BYTES, MAX_MESSAGE_BYTES, MAX_RECV_WAIT,
    MAX_SESSION_RINGS, MAX_STOP_GRACE,
};
use tasklet_runtime::lease::PERSISTENT_GRACE;
use tasklet_runtime::{BackendKind, GpuError, Host, Manifest};
use tasklet_tests::{
    assert_baseline, backend, eventually, manifest, pid_alive, run_probe, test_host,
};

use super::graphs::ADD_STEP_PTX;

const ACTOR_PTX: &str = include_str!("../../../kernels/actor.ptx");

/// Kernels that write ring counters, run as persistent kernels that return at once:
/// `break_rings` stores a counter no ring can have into each of its two rings (the to-device
/// ring's tail, the kernel's as consumer, and the from-device ring's head, the kernel's as
/// producer: 2^30 each); `set_head` stores `set_head_value` into a ring's head.
const COUNTERS_PTX: &str = "\
.version 7.0
.target sm_50
.address_size 64

.visible .entry break_rings(
\t.param .u64 break_rings_to_device,
\t.param .u64 break_rings_from_device
)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<5>;

\tld.param.u64 %rd1, [break_rings_to_device];
\tld.param.u64 %rd2, [break_rings_from_device];
\tcvta.to.global.u64 %rd3, %rd1;
\tcvta.to.global.u64 %rd4, %rd2;
\tmov.u32 %r1, 1073741824;
\tst.global.u32 [%rd3+64], %r1;
\tst.global.u32 [%rd4], %r1;
\tret;
}

.visible .entry set_head(
\t.param .u64 set_head_ring,
\t.param .u32 set_head_value
)
{
\t.reg .b32 %r<2>;
\t.reg .b64 %rd<3>;

\tld.param.u64 %rd1, [set_head_ring];
\tld.param.u32 %r1, [set_head_value];
\tcvta.to.global.u64 %rd2, %rd1;
\tst.global.u32 [%rd2], %r1;
\tret;
}
";

/// Floats in one message.
const FLOATS: usize = 16;
const MESSAGE: u32 = (FLOATS * 4) as u32;
/// Slots of each ring.
const SLOTS: u32 = 64;
/// Every wait of these tests ends by then.
const BOUND: Duration = Duration::from_secs(30);
/// What `add_step` works on.
const N: u32 = 256;

/// The probe's manifest with the `persistent` right and room for `max_persistent` actors.
fn persistent_manifest(max_persistent: u32) -> Manifest {
    let mut m = manifest("testing/probe");
    m.gpu.rights = m.gpu.rights.with(Right::Persistent);
    m.gpu.max_persistent = max_persistent;
    m
}

/// A service for `manifest`'s grant on `host`, charged to `tenant`.
fn service(host: &Host, manifest: &Manifest, tenant: &str) -> LocalGpu {
    let grant = host.policy().grant(manifest);
    LocalGpu::new(grant, Arc::clone(host.leases())).with_tenant(tenant)
}

struct Rig {
    gpu: LocalGpu,
    lease: LeaseId,
    s: SessionId,
    /// kernels/actor.ptx.
    actors: ModuleId,
}

/// A lease of 4 MiB and a session on it, with the actor kernels loaded.
fn rig_on(mut gpu: LocalGpu) -> Rig {
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 4 << 20,
            secs: 60,
            device: None,
        })
        .expect("lease");
    let s = gpu.session_open(lease).expect("session");
    let actors = gpu.module_load(s, ACTOR_PTX).expect("actor.ptx loads");
    Rig {
        gpu,
        lease,
        s,
        actors,
    }
}

fn rig(host: &Host) -> Rig {
    rig_on(service(host, &persistent_manifest(1), "actors"))
}

fn one_block() -> LaunchConfig {
    LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// Message `k`: word `w` is `k * FLOATS + w` (exact in f32 for every `k` used here).
fn message(k: usize) -> Vec<u8> {
    (0..FLOATS)
        .flat_map(|w| ((k * FLOATS + w) as f32).to_le_bytes())
        .collect()
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Asserts that answers `first..` are actor_scale's (`x * 2 + 1`) of the messages sent.
#[track_caller]
fn check_answers(answers: &[u8], first: usize) {
    for (i, answer) in answers.chunks(MESSAGE as usize).enumerate() {
        let want: Vec<f32> = floats(&message(first + i))
            .iter()
            .map(|x| x.mul_add(2.0, 1.0))
            .collect();
        assert_eq!(floats(answer), want, "answer {}", first + i);
    }
}

impl Rig {
    fn op(&mut self, op: ActorOp<'_>) -> Result<ActorReply, GpuError> {
        self.gpu.actor_op(self.s, op)
    }

    fn ring_in(&mut self, session: SessionId, direction: RingDirection, capacity: u32) -> RingId {
        match self.gpu.actor_op(
            session,
            ActorOp::NewRing {
                direction,
                layout: RingLayout::Plain,
                message_size: MESSAGE,
                capacity,
            },
        ) {
            Ok(ActorReply::Ring(id)) => id,
            other => panic!("a new ring, got {other:?}"),
        }
    }

    fn sequenced_ring(&mut self, direction: RingDirection, capacity: u32) -> RingId {
        match self.op(ActorOp::NewRing {
            direction,
            layout: RingLayout::Sequenced,
            message_size: MESSAGE,
            capacity,
        }) {
            Ok(ActorReply::Ring(id)) => id,
            other => panic!("a sequenced ring, got {other:?}"),
        }
    }

    fn ring(&mut self, direction: RingDirection) -> RingId {
        self.ring_in(self.s, direction, SLOTS)
    }

    fn new_ring(&mut self, message_size: u32, capacity: u32) -> Result<ActorReply, GpuError> {
        self.op(ActorOp::NewRing {
            direction: RingDirection::ToDevice,
            layout: RingLayout::Plain,
            message_size,
            capacity,
        })
    }

    /// Starts `kernel` of actor.ptx (actor_scale, actor_fault: the rings, the control block,
    /// 2.0; actor_deaf: the control block) on `grid` blocks of 64 threads.
    fn start(
        &mut self,
        kernel: &str,
        rings: Option<(RingId, RingId)>,
        grid: u32,
    ) -> Result<ActorId, GpuError> {
        let args = match rings {
            Some((inbox, outbox)) => vec![
                ActorArg::Ring(inbox),
                ActorArg::Ring(outbox),
                ActorArg::Control,
                ActorArg::Arg(KernelArg::F32(2.0)),
            ],
            None => vec![ActorArg::Control],
        };
        let config = LaunchConfig {
            grid: [grid, 1, 1],
            ..one_block()
        };
        match self.op(ActorOp::Launch {
            module: self.actors,
            kernel: KernelRef::Named(kernel),
            config: &config,
            args: &args,
        })? {
            ActorReply::Actor(id) => Ok(id),
            other => panic!("an actor, got {other:?}"),
        }
    }

    /// An inbox, an outbox and actor_scale (or `kernel`) serving them on one block.
    fn serving(&mut self, kernel: &str) -> (RingId, RingId, ActorId) {
        let inbox = self.ring(RingDirection::ToDevice);
        let outbox = self.ring(RingDirection::FromDevice);
        let actor = self
            .start(kernel, Some((inbox, outbox)), 1)
            .expect("the actor starts");
        (inbox, outbox, actor)
    }

    fn send(&mut self, ring: RingId, messages: &[u8]) -> u32 {
        match self.op(ActorOp::Send { ring, messages }) {
            Ok(ActorReply::Sent(n)) => n,
            other => panic!("sent, got {other:?}"),
        }
    }

    fn recv(&mut self, ring: RingId, max: u32, wait: Duration) -> Vec<u8> {
        match self.op(ActorOp::Recv { ring, max, wait }) {
            Ok(ActorReply::Messages(m)) => m,
            other => panic!("messages, got {other:?}"),
        }
    }

    /// Sends `messages` (whole ones, concatenated) through the actor, as many at once as the
    /// inbox takes, and returns every answer.
    fn exchange(&mut self, inbox: RingId, outbox: RingId, messages: &[u8]) -> Vec<u8> {
        let began = Instant::now();
        let (mut sent, mut got) = (0usize, Vec::new());
        while got.len() < messages.len() {
            assert!(
                began.elapsed() < BOUND,
                "{} of {} answers came back",
                got.len() / MESSAGE as usize,
                messages.len() / MESSAGE as usize
            );
            if sent < messages.len() {
                sent += self.send(inbox, &messages[sent..]) as usize * MESSAGE as usize;
            }
            got.extend(self.recv(outbox, SLOTS, Duration::from_millis(50)));
        }
        got
    }

    fn status(&mut self, actor: ActorId) -> ActorStatus {
        match self.op(ActorOp::Status(actor)) {
            Ok(ActorReply::Status(s)) => s,
            other => panic!("a status, got {other:?}"),
        }
    }

    fn stop(&mut self, actor: ActorId, grace: Duration) -> ActorStatus {
        match self.op(ActorOp::Stop { actor, grace }) {
            Ok(ActorReply::Status(s)) => s,
            other => panic!("a status, got {other:?}"),
        }
    }

    /// Waits (bounded) until the actor's status says it ended.
    fn ended(&mut self, actor: ActorId) -> ActorStatus {
        let mut last = None;
        let ended = eventually(BOUND, || {
            let s = self.status(actor);
            let done = s.has_terminated;
            last = Some(s);
            done
        });
        let last = last.expect("a status");
        assert!(ended, "the actor did not end: {last:?}");
        last
    }

    /// `add_step` over `x` (N words) and `step`, launched and synchronized: how long it took.
    fn launch_and_sync(&mut self, add: ModuleId, x: BufferId, step: BufferId) -> Duration {
        let began = Instant::now();
        launch_add_step(&mut self.gpu, self.s, add, x, step).expect("launch + sync");
        began.elapsed()
    }

    /// The lease's worker process (it has one, and is the only lease on the host).
    fn worker_pid(&self, host: &Host) -> u32 {
        let pids = host.lease_worker_pids();
        assert_eq!(pids.len(), 1, "{pids:?}");
        pids[0]
    }
}

/// `add_step` loaded, with its `x` (N words) and `step` buffers.
fn add_step_setup(gpu: &mut LocalGpu, s: SessionId) -> (ModuleId, BufferId, BufferId) {
    let m = gpu.module_load(s, ADD_STEP_PTX).expect("add_step loads");
    let x = gpu.mem_alloc(s, 4 * u64::from(N)).expect("alloc");
    let step = gpu.mem_alloc(s, 8).expect("alloc");
    gpu.mem_write(s, step, 0, &1u64.to_le_bytes())
        .expect("write step");
    (m, x, step)
}

fn launch_add_step(
    gpu: &mut LocalGpu,
    s: SessionId,
    m: ModuleId,
    x: BufferId,
    step: BufferId,
) -> Result<(), GpuError> {
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [N, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        KernelArg::Buffer {
            buffer: x,
            offset: 0,
        },
        KernelArg::Buffer {
            buffer: step,
            offset: 0,
        },
        KernelArg::U32(N),
    ];
    gpu.launch_kernel(s, m, KernelRef::At(0), &config, &args)?;
    gpu.sync(s)
}

#[track_caller]
fn refused<T: std::fmt::Debug>(r: Result<T, GpuError>, kind: &str, says: &str) {
    match r {
        Err(e) if e.name() == kind && e.to_string().contains(says) => {
            // One readable sentence: no string continuation lost in the source.
            assert!(!e.to_string().contains("  "), "a run of spaces in {e}");
        }
        other => panic!("expected {kind} saying {says:?}, got {other:?}"),
    }
}

/// actor_scale_seq serves sequenced rings (each word beside its message's number): 40 messages
/// one at a time and 100 in batches through rings of 8 slots (so many laps, and batches larger
/// than the ring), every answer checked and counted; asked to stop, it returns. Given plain rings
/// it counts an error and returns rather than reading them as sequenced.
#[test]
fn an_actor_serves_sequenced_rings_and_refuses_plain_ones() {
    let host = test_host!();
    let mut r = rig(&host);
    let inbox = r.sequenced_ring(RingDirection::ToDevice, 8);
    let outbox = r.sequenced_ring(RingDirection::FromDevice, 8);
    let actor = r
        .start("actor_scale_seq", Some((inbox, outbox)), 1)
        .expect("the actor starts");
    for k in 0..40 {
        let answers = r.exchange(inbox, outbox, &message(k));
        check_answers(&answers, k);
    }
    for (first, count) in [(40, 8), (48, 3), (51, 20), (71, 69)] {
        let batch: Vec<u8> = (first..first + count).flat_map(message).collect();
        let answers = r.exchange(inbox, outbox, &batch);
        check_answers(&answers, first);
    }
    let counted = eventually(BOUND, || r.status(actor).messages_processed == 140);
    assert!(counted, "{:?}", r.status(actor));
    let s = r.stop(actor, Duration::from_secs(5));
    assert!(
        s.has_terminated && s.failure.is_none() && s.errors_encountered == 0,
        "{s:?}"
    );
    r.op(ActorOp::DropActor(actor)).expect("drop");

    // Plain rings under the sequenced kernel: counted, and the kernel returns by itself.
    let plain_in = r.ring(RingDirection::ToDevice);
    let plain_out = r.ring(RingDirection::FromDevice);
    let actor = r
        .start("actor_scale_seq", Some((plain_in, plain_out)), 1)
        .expect("the actor starts");
    let s = r.ended(actor);
    assert!(
        s.errors_encountered == 1 && s.failure.is_none() && s.messages_processed == 0,
        "{s:?}"
    );
}

/// A second actor_scale_seq started on the rings the first one served answers on from where
/// that one stopped (it keeps the outbox's head, which the next reads), every answer its own
/// message's.
#[test]
fn a_sequenced_actor_started_again_on_its_rings_answers_on() {
    let host = test_host!();
    let mut r = rig(&host);
    let inbox = r.sequenced_ring(RingDirection::ToDevice, 8);
    let outbox = r.sequenced_ring(RingDirection::FromDevice, 8);
    let mut next = 0;
    for (singles, batch) in [(5, 12), (3, 20)] {
        let actor = r
            .start("actor_scale_seq", Some((inbox, outbox)), 1)
            .expect("the actor starts");
        for k in next..next + singles {
            check_answers(&r.exchange(inbox, outbox, &message(k)), k);
        }
        next += singles;
        let messages: Vec<u8> = (next..next + batch).flat_map(message).collect();
        check_answers(&r.exchange(inbox, outbox, &messages), next);
        next += batch;
        let s = r.stop(actor, Duration::from_secs(5));
        assert!(
            s.has_terminated
                && s.failure.is_none()
                && s.errors_encountered == 0
                && s.messages_processed == (singles + batch) as u64,
            "{s:?}"
        );
        r.op(ActorOp::DropActor(actor)).expect("drop");
    }
    drop(r);
    assert_baseline(&host);
}

/// A sequenced ring's consumer takes any whole answer, and actor_scale_seq answers a message it
/// saw whole beyond one it did not yet, counting it in a later pass: the host's outbox tail may
/// run ahead of the kernel's head, by at most the capacity, and the kernel serves on from there.
/// Further ahead is a ring no kernel could have left: counted, and the kernel returns. Here the
/// outbox's head is set `behind` its tail before the kernel starts, so the kernel numbers inbox
/// message j's answer j - behind, and the host's first answers are those of messages behind on.
#[test]
fn a_sequenced_outbox_taken_ahead_of_its_kernel_is_served_up_to_its_capacity() {
    const CAPACITY: u32 = 8;
    let host = test_host!();
    let mut r = rig(&host);
    let set_head = r
        .gpu
        .module_load(r.s, COUNTERS_PTX)
        .expect("the counter kernels load");
    for behind in [2, CAPACITY, CAPACITY + 1] {
        let inbox = r.sequenced_ring(RingDirection::ToDevice, CAPACITY);
        let outbox = r.sequenced_ring(RingDirection::FromDevice, CAPACITY);
        let setter = match r.op(ActorOp::Launch {
            module: set_head,
            kernel: KernelRef::Named("set_head"),
            config: &one_block(),
            args: &[
                ActorArg::Ring(outbox),
                ActorArg::Arg(KernelArg::U32(behind.wrapping_neg())),
            ],
        }) {
            Ok(ActorReply::Actor(id)) => id,
            other => panic!("{other:?}"),
        };
        r.ended(setter);
        r.op(ActorOp::DropActor(setter)).expect("drop");
        let actor = r
            .start("actor_scale_seq", Some((inbox, outbox)), 1)
            .expect("the actor starts");
        if behind > CAPACITY {
            let s = r.ended(actor);
            assert!(
                s.errors_encountered == 1 && s.failure.is_none() && s.messages_processed == 0,
                "{behind} behind: {s:?}"
            );
        } else {
            let total = behind as usize + 4;
            let messages: Vec<u8> = (0..total).flat_map(message).collect();
            let (mut sent, mut got) = (0, Vec::new());
            let began = Instant::now();
            while got.len() < 4 * MESSAGE as usize {
                assert!(
                    began.elapsed() < BOUND,
                    "{behind} behind: {} answers came back: {:?}",
                    got.len() / MESSAGE as usize,
                    r.status(actor)
                );
                if sent < messages.len() {
                    sent += r.send(inbox, &messages[sent..]) as usize * MESSAGE as usize;
                }
                got.extend(r.recv(outbox, SLOTS, Duration::from_millis(50)));
            }
            check_answers(&got, behind as usize);
            let s = r.stop(actor, Duration::from_secs(5));
            assert!(
                s.has_terminated
                    && s.failure.is_none()
                    && s.errors_encountered == 0
                    && s.messages_processed == total as u64,
                "{behind} behind: {s:?}"
            );
        }
        r.op(ActorOp::DropActor(actor)).expect("drop");
    }
    drop(r);
    assert_baseline(&host);
}

/// actor_scale serves 1200 messages (checked) and keeps count; a normal launch + sync on the same
/// session while it runs is not held up by it; asked to stop, it returns, with no failure.
#[test]
fn an_actor_serves_messages_beside_normal_launches_until_asked_to_stop() {
    let host = test_host!();
    let mut r = rig(&host);
    // Every module the lease needs is loaded before its persistent kernel starts: a GPU's driver
    // loads code only once every running kernel has ended, so a load beside one is refused.
    let (add, x, step) = add_step_setup(&mut r.gpu, r.s);
    let (inbox, outbox, actor) = r.serving("actor_scale");
    let s = r.status(actor);
    assert!(
        s.is_active && !s.has_terminated && s.failure.is_none(),
        "{s:?}"
    );
    let began = Instant::now();
    refused(
        r.gpu
            .module_load(r.s, &format!("{ADD_STEP_PTX}\n// beside\n")),
        "load-failed",
        "while a persistent kernel runs",
    );
    assert!(began.elapsed() < Duration::from_secs(1));

    // Normal work on the same session: its sync waits for it, not for the actor; nor does a
    // free.
    let spare = r.gpu.mem_alloc(r.s, 4096).expect("alloc");
    let began = Instant::now();
    r.gpu.mem_free(r.s, spare);
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    let words: Vec<u8> = (0..N).flat_map(|i| i.to_le_bytes()).collect();
    r.gpu.mem_write(r.s, x, 0, &words).expect("write");
    let took = r.launch_and_sync(add, x, step);
    assert!(took < Duration::from_secs(5), "launch + sync took {took:?}");
    let got = r.gpu.mem_read(r.s, x, 0, 4 * u64::from(N)).expect("read");
    let want: Vec<u8> = (0..N).flat_map(|i| (3 * i + 1).to_le_bytes()).collect();
    assert!(got == want, "add_step beside the actor went wrong");
    assert!(r.status(actor).is_active, "the sync ended the actor");

    // 1200 messages in batches of 50 (the inbox holds 64), then 100 one at a time.
    let total = 1200;
    let began = Instant::now();
    for first in (0..total).step_by(50) {
        let batch: Vec<u8> = (first..first + 50).flat_map(message).collect();
        let answers = r.exchange(inbox, outbox, &batch);
        check_answers(&answers, first);
    }
    let batched = began.elapsed();
    let began = Instant::now();
    for k in total..total + 100 {
        let answers = r.exchange(inbox, outbox, &message(k));
        check_answers(&answers, k);
    }
    let one_by_one = began.elapsed() / 100;
    eprintln!(
        "actors: {total} messages in batches of 50 in {batched:?}; one at a time {one_by_one:?} a round trip"
    );
    let s = r.status(actor);
    assert_eq!(s.messages_processed, total as u64 + 100, "{s:?}");
    assert!(s.is_active && s.errors_encountered == 0, "{s:?}");

    let began = Instant::now();
    let s = r.stop(actor, Duration::from_millis(500));
    assert!(began.elapsed() < Duration::from_millis(500) + Duration::from_secs(1));
    assert!(
        s.has_terminated && !s.is_active && s.should_terminate && s.failure.is_none(),
        "{s:?}"
    );
    assert_eq!(s.messages_processed, total as u64 + 100);
    // Stopped, it stays stopped; nothing more can come, so a receive answers at once.
    assert_eq!(r.stop(actor, Duration::from_millis(10)), s);
    let began = Instant::now();
    assert!(r.recv(outbox, 1, Duration::from_secs(5)).is_empty());
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    // The lease goes on.
    r.launch_and_sync(add, x, step);
    r.op(ActorOp::DropActor(actor)).expect("drop actor");
    r.op(ActorOp::DropRing(inbox)).expect("drop ring");
    drop(r);
    assert_baseline(&host);
}

/// A handler that faults ends its actor, whose status says why; the lease's next operation
/// fails with the fault, later ones `lease-expired`; everything goes back.
#[test]
fn an_actor_whose_handler_faults_says_so_and_its_lease_ends() {
    let host = test_host!();
    let mut r = rig(&host);
    let (inbox, outbox, actor) = r.serving("actor_fault");
    check_answers(&r.exchange(inbox, outbox, &message(3)), 3);
    let mut bad = message(0);
    bad[..4].copy_from_slice(&(-1.0f32).to_le_bytes());
    assert_eq!(r.send(inbox, &bad), 1);
    let s = r.ended(actor);
    eprintln!("actors: a faulted actor's status: {s:?}");
    assert!(!s.is_active && s.has_terminated, "{s:?}");
    assert_eq!(s.messages_processed, 1, "{s:?}");
    let failure = s.failure.clone().expect("the status says why it ended");
    if backend() == BackendKind::Emu {
        assert!(
            failure.contains("PTX line") && failure.contains("out-of-bounds"),
            "{failure}"
        );
    }
    // Nothing more comes: a receive answers at once.
    let began = Instant::now();
    assert!(r.recv(outbox, 1, Duration::from_secs(5)).is_empty());
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    // The lease: a fault leaves a GPU's context unusable, so the next operation reports it,
    // naming the persistent kernel, and the lease has ended (on the emulator as on a GPU).
    match r.gpu.sync(r.s) {
        Err(GpuError::KernelFault(m)) => assert!(m.contains("actor_fault"), "{m}"),
        other => panic!("a sync after the actor's fault: {other:?}"),
    }
    refused(
        r.gpu.mem_alloc(r.s, 64),
        "lease-expired",
        "fatal kernel error",
    );
    // Its status stays what it was.
    assert_eq!(r.status(actor).failure, Some(failure));
    drop(r);
    assert_baseline(&host);
}

/// An actor that ignores `should_terminate`: `stop` waits its grace, then ends the worker (the
/// process goes) and the lease with it, and says so; later operations are `lease-expired`.
#[test]
fn an_actor_that_will_not_stop_is_ended_with_its_worker_and_lease() {
    let host = test_host!();
    let mut r = rig(&host);
    let pid = r.worker_pid(&host);
    let actor = r.start("actor_deaf", None, 1).expect("actor_deaf starts");
    // It runs: it counts its wake-ups.
    assert!(
        eventually(BOUND, || r.status(actor).errors_encountered > 0),
        "actor_deaf never woke"
    );
    let grace = Duration::from_millis(200);
    let began = Instant::now();
    let s = r.stop(actor, grace);
    let took = began.elapsed();
    eprintln!("actors: stop of a deaf actor took {took:?}: {s:?}");
    // The grace asked, not the lease's own on top of it.
    assert!(
        took >= grace && took < grace + Duration::from_millis(400),
        "{took:?}"
    );
    assert!(
        s.has_terminated && !s.is_active && s.should_terminate,
        "{s:?}"
    );
    let failure = s.failure.expect("the status says why");
    assert!(failure.contains("did not return within 200ms"), "{failure}");
    // The lease has ended with the worker, and says why in one readable sentence.
    let ended = r.gpu.sync(r.s);
    refused(
        ended.clone(),
        "lease-expired",
        "did not return within 200ms",
    );
    let why = ended.unwrap_err().to_string();
    assert!(
        !why.contains("  "),
        "a message with a run of spaces: {why:?}"
    );
    refused(
        r.op(ActorOp::NewRing {
            direction: RingDirection::ToDevice,
            layout: RingLayout::Plain,
            message_size: 4,
            capacity: 1,
        }),
        "lease-expired",
        "",
    );
    refused(r.gpu.mem_alloc(r.s, 64), "lease-expired", "");
    let s = r.status(actor);
    assert!(s.has_terminated && s.failure.is_some(), "{s:?}");
    assert!(
        eventually(BOUND, || !pid_alive(pid)),
        "the deaf actor's worker {pid} still runs"
    );
    drop(r);
    assert_baseline(&host);
}

/// Dropping a session stops its actors (the lease goes on, and a new actor on it runs); dropping
/// a session, a lease or the whole service with a deaf actor running ends its worker after the
/// lease's grace; the books come back every time.
#[test]
fn dropping_a_session_lease_or_service_stops_its_actors() {
    let host = test_host!();
    // A session with a serving actor.
    let mut r = rig(&host);
    let pid = r.worker_pid(&host);
    let (inbox, outbox, actor) = r.serving("actor_scale");
    check_answers(&r.exchange(inbox, outbox, &message(7)), 7);
    let dropped = r.s;
    r.gpu.session_drop(dropped);
    refused(
        r.gpu.actor_op(dropped, ActorOp::Status(actor)),
        "invalid-argument",
        "",
    );
    // The lease and its worker go on: a new session launches and syncs.
    r.s = r.gpu.session_open(r.lease).expect("session");
    let (add, x, step) = add_step_setup(&mut r.gpu, r.s);
    r.launch_and_sync(add, x, step);
    assert_eq!(r.worker_pid(&host), pid, "the same worker");
    // A second actor may start: the first no longer counts against `max-persistent`.
    r.actors = r.gpu.module_load(r.s, ACTOR_PTX).expect("loads");
    let (_, _, again) = r.serving("actor_scale");
    let s = r.status(again);
    assert!(s.is_active, "{s:?}");
    // The lease dropped with it running: asked, it returns; the worker is kept.
    r.gpu.lease_drop(r.lease);
    drop(r);
    assert_baseline(&host);

    // A deaf actor, its session dropped: after the lease's grace it ends with its worker, and
    // the lease with them.
    let mut r = rig(&host);
    let pid = r.worker_pid(&host);
    r.start("actor_deaf", None, 1).expect("starts");
    let began = Instant::now();
    r.gpu.session_drop(r.s);
    let took = began.elapsed();
    assert!(
        took >= PERSISTENT_GRACE && took < PERSISTENT_GRACE + Duration::from_millis(400),
        "{took:?}"
    );
    refused(
        r.gpu.session_open(r.lease),
        "lease-expired",
        "did not return",
    );
    assert!(
        eventually(BOUND, || !pid_alive(pid)),
        "worker {pid} survived"
    );
    drop(r);
    assert_baseline(&host);

    // A deaf actor, its lease dropped: the worker ends after the lease's grace.
    let mut r = rig(&host);
    let pid = r.worker_pid(&host);
    r.start("actor_deaf", None, 1).expect("starts");
    let began = Instant::now();
    r.gpu.lease_drop(r.lease);
    eprintln!(
        "actors: a lease dropped with a deaf actor ended in {:?}",
        began.elapsed()
    );
    assert!(
        eventually(BOUND, || !pid_alive(pid)),
        "worker {pid} survived"
    );
    assert_baseline(&host);
    drop(r);

    // A deaf actor, its whole service dropped (the tasklet ended).
    let mut r = rig(&host);
    let pid = r.worker_pid(&host);
    r.start("actor_deaf", None, 1).expect("starts");
    drop(r);
    assert!(
        eventually(BOUND, || !pid_alive(pid)),
        "worker {pid} survived"
    );
    assert_baseline(&host);
}

/// Without the `persistent` right no ring or actor; past `max-persistent` no actor.
#[test]
fn persistent_kernels_need_their_right_and_stay_within_max_persistent() {
    let host = test_host!();
    let mut m = manifest("testing/probe");
    m.gpu.rights = m
        .gpu
        .rights
        .iter()
        .filter(|r| *r != Right::Persistent)
        .collect();
    m.gpu.max_persistent = 0;
    let mut plain = rig_on(service(&host, &m, "plain"));
    refused(
        plain.new_ring(MESSAGE, SLOTS),
        "unauthorized",
        "`persistent`",
    );
    refused(
        plain.start("actor_deaf", None, 1),
        "unauthorized",
        "`persistent`",
    );
    drop(plain);

    let mut r = rig(&host);
    // Another session of the same lease, its module loaded before the actor starts (no module
    // loads beside a persistent kernel).
    let other = r.gpu.session_open(r.lease).expect("session");
    let m = r.gpu.module_load(other, ACTOR_PTX).expect("loads");
    let (inbox, outbox, first) = r.serving("actor_scale");
    refused(
        r.start("actor_scale", Some((inbox, outbox)), 1),
        "quota-exceeded",
        "max-persistent",
    );
    // The other session counts too.
    let refused_there = r.gpu.actor_op(
        other,
        ActorOp::Launch {
            module: m,
            kernel: KernelRef::Named("actor_deaf"),
            config: &one_block(),
            args: &[ActorArg::Control],
        },
    );
    refused(refused_there, "quota-exceeded", "max-persistent");
    // Stopped, it makes room.
    assert!(r.stop(first, Duration::from_millis(500)).failure.is_none());
    drop(r);
    assert_baseline(&host);

    // Room for two: a lease still runs one at a time; a second lease runs the second.
    let mut r = rig_on(service(&host, &persistent_manifest(2), "two"));
    let (inbox, outbox, first) = r.serving("actor_scale");
    refused(
        r.start("actor_deaf", None, 1),
        "quota-exceeded",
        "one at a time",
    );
    let lease2 = r
        .gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        })
        .expect("a second lease");
    let s2 = r.gpu.session_open(lease2).expect("session");
    let m2 = r.gpu.module_load(s2, ACTOR_PTX).expect("loads");
    let (in2, out2) = (
        r.ring_in(s2, RingDirection::ToDevice, SLOTS),
        r.ring_in(s2, RingDirection::FromDevice, SLOTS),
    );
    let args = [
        ActorArg::Ring(in2),
        ActorArg::Ring(out2),
        ActorArg::Control,
        ActorArg::Arg(KernelArg::F32(2.0)),
    ];
    let launched = r.gpu.actor_op(
        s2,
        ActorOp::Launch {
            module: m2,
            kernel: KernelRef::Named("actor_scale"),
            config: &one_block(),
            args: &args,
        },
    );
    assert!(matches!(launched, Ok(ActorReply::Actor(_))), "{launched:?}");
    // Two run: a third is past max-persistent.
    refused(
        r.gpu.actor_op(
            s2,
            ActorOp::Launch {
                module: m2,
                kernel: KernelRef::Named("actor_scale"),
                config: &one_block(),
                args: &args,
            },
        ),
        "quota-exceeded",
        "max-persistent",
    );
    assert!(r.stop(first, Duration::from_millis(500)).failure.is_none());
    let second = r
        .start("actor_scale", Some((inbox, outbox)), 1)
        .expect("room again");
    check_answers(&r.exchange(inbox, outbox, &message(1)), 1);
    r.stop(second, Duration::from_millis(500));
    drop(r);
    assert_baseline(&host);
}

/// A ring's message size, capacity and bytes, the rings of a session and the mapped memory of a
/// lease: each limit bites, typed, and dropping a ring makes room.
#[test]
fn rings_stay_within_their_limits() {
    let host = test_host!();
    let mut r = rig(&host);
    for size in [0, 2, 6, MAX_MESSAGE_BYTES + 4] {
        refused(r.new_ring(size, SLOTS), "invalid-argument", "multiple of 4");
    }
    r.new_ring(MAX_MESSAGE_BYTES, 1)
        .expect("the largest message");
    for capacity in [0, 3, 100] {
        refused(
            r.new_ring(MESSAGE, capacity),
            "invalid-argument",
            "power of two",
        );
    }
    // A ring larger than a lease's mapped memory.
    refused(
        r.new_ring(1024, 1 << 15),
        "quota-exceeded",
        "larger than a lease's",
    );
    refused(
        r.new_ring(MAX_MESSAGE_BYTES, 1 << 31),
        "quota-exceeded",
        "larger than",
    );
    // Sequenced slots take twice the bytes: a ring of half the lease's mapped memory fits plain,
    // not sequenced.
    let half = (MAX_LEASE_MAPPED_BYTES / 2) as u32 / MAX_MESSAGE_BYTES;
    match r.new_ring(MAX_MESSAGE_BYTES, half) {
        Ok(ActorReply::Ring(id)) => r.op(ActorOp::DropRing(id)).expect("drop"),
        other => panic!("a plain ring of half the mapped memory: {other:?}"),
    };
    let sequenced = |r: &mut Rig, capacity| {
        r.op(ActorOp::NewRing {
            direction: RingDirection::ToDevice,
            layout: RingLayout::Sequenced,
            message_size: MAX_MESSAGE_BYTES,
            capacity,
        })
    };
    match sequenced(&mut r, half / 2) {
        Ok(ActorReply::Ring(id)) => r.op(ActorOp::DropRing(id)).expect("drop"),
        other => panic!("a sequenced ring of half the mapped memory: {other:?}"),
    };
    refused(
        sequenced(&mut r, half),
        "quota-exceeded",
        "(sequenced: two bytes of slot a byte)",
    );
    drop(r);
    assert_baseline(&host);

    // MAX_SESSION_RINGS a session.
    let mut r = rig(&host);
    let rings: Vec<RingId> = (0..MAX_SESSION_RINGS)
        .map(|_| match r.new_ring(4, 1) {
            Ok(ActorReply::Ring(id)) => id,
            other => panic!("{other:?}"),
        })
        .collect();
    refused(
        r.new_ring(4, 1),
        "invalid-argument",
        &format!("at most {MAX_SESSION_RINGS} rings"),
    );
    r.op(ActorOp::DropRing(rings[5])).expect("drop");
    r.new_ring(4, 1).expect("room again");
    // Another session of the lease has its own count.
    let other = r.gpu.session_open(r.lease).expect("session");
    r.ring_in(other, RingDirection::ToDevice, 1);
    drop(r);
    assert_baseline(&host);

    // The lease's mapped memory: rings of 4 MiB (+ header) until it is full.
    let mut r = rig(&host);
    let big = MAX_MESSAGE_BYTES;
    let per_ring = (4 << 20) / big;
    let fit = MAX_LEASE_MAPPED_BYTES / (4 << 20) - 1;
    let rings: Vec<RingId> = (0..fit)
        .map(|_| match r.new_ring(big, per_ring) {
            Ok(ActorReply::Ring(id)) => id,
            other => panic!("{other:?}"),
        })
        .collect();
    refused(r.new_ring(big, per_ring), "quota-exceeded", "no room");
    // A second session of the same lease shares the lease's memory.
    let other = r.gpu.session_open(r.lease).expect("session");
    refused(
        r.gpu.actor_op(
            other,
            ActorOp::NewRing {
                direction: RingDirection::FromDevice,
                layout: RingLayout::Plain,
                message_size: big,
                capacity: per_ring,
            },
        ),
        "quota-exceeded",
        "no room",
    );
    r.op(ActorOp::DropRing(rings[0])).expect("drop");
    r.new_ring(big, per_ring).expect("room again");
    drop(r);
    assert_baseline(&host);
}

/// Rings used the wrong way, rings of another session or service, waits past their limits: each
/// refused as `invalid-argument`, and the actor serves on.
#[test]
fn misused_rings_and_actors_are_refused() {
    let host = test_host!();
    // Room for a second actor: the foreign launch below is refused for its rings, not its count.
    let mut r = rig_on(service(&host, &persistent_manifest(2), "actors"));
    let (inbox, outbox, actor) = r.serving("actor_scale");
    refused(
        r.op(ActorOp::Send {
            ring: outbox,
            messages: &message(0),
        }),
        "invalid-argument",
        "send on a to-device ring",
    );
    refused(
        r.op(ActorOp::Recv {
            ring: inbox,
            max: 1,
            wait: Duration::ZERO,
        }),
        "invalid-argument",
        "receive on a from-device ring",
    );
    refused(
        r.op(ActorOp::Send {
            ring: inbox,
            messages: &message(0)[..MESSAGE as usize - 4],
        }),
        "invalid-argument",
        "not whole messages",
    );
    refused(
        r.op(ActorOp::Recv {
            ring: outbox,
            max: 1,
            wait: MAX_RECV_WAIT + Duration::from_millis(1),
        }),
        "invalid-argument",
        "waits at most",
    );
    refused(
        r.op(ActorOp::Stop {
            actor,
            grace: MAX_STOP_GRACE + Duration::from_millis(1),
        }),
        "invalid-argument",
        "at most",
    );

    // Another session of the same lease: the rings and the actor are not its own.
    let other = r.gpu.session_open(r.lease).expect("session");
    let foreign = [
        ActorOp::Send {
            ring: inbox,
            messages: &[0; MESSAGE as usize],
        },
        ActorOp::Recv {
            ring: outbox,
            max: 1,
            wait: Duration::ZERO,
        },
        ActorOp::Status(actor),
        ActorOp::Stop {
            actor,
            grace: Duration::ZERO,
        },
    ];
    for op in foreign {
        refused(
            r.gpu.actor_op(other, op),
            "invalid-argument",
            "another session",
        );
    }
    let args = [
        ActorArg::Ring(inbox),
        ActorArg::Ring(outbox),
        ActorArg::Control,
        ActorArg::Arg(KernelArg::F32(2.0)),
    ];
    // A session of another lease (a lease runs one persistent kernel at a time) launching with
    // them.
    let lease2 = r
        .gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 60,
            device: None,
        })
        .expect("a second lease");
    let elsewhere = r.gpu.session_open(lease2).expect("session");
    let m = r.gpu.module_load(elsewhere, ACTOR_PTX).expect("loads");
    refused(
        r.gpu.actor_op(
            elsewhere,
            ActorOp::Launch {
                module: m,
                kernel: KernelRef::Named("actor_scale"),
                config: &one_block(),
                args: &args,
            },
        ),
        "invalid-argument",
        "another session",
    );
    // Dropping another session's ring or actor does nothing to it.
    r.gpu
        .actor_op(other, ActorOp::DropRing(inbox))
        .expect("drop");
    r.gpu
        .actor_op(other, ActorOp::DropActor(actor))
        .expect("drop");

    // Another service (another tenant's tasklet): its rings' ids mean nothing here, and ours
    // nothing there.
    let mut theirs = rig_on(service(&host, &persistent_manifest(1), "other"));
    let their_ring = theirs.ring(RingDirection::FromDevice);
    refused(
        r.op(ActorOp::Recv {
            ring: their_ring,
            max: 1,
            wait: Duration::ZERO,
        }),
        "invalid-argument",
        "another session",
    );
    refused(
        theirs.op(ActorOp::Send {
            ring: inbox,
            messages: &message(0),
        }),
        "invalid-argument",
        "another session",
    );
    refused(
        theirs.op(ActorOp::Status(actor)),
        "invalid-argument",
        "another session",
    );
    drop(theirs);

    // Through all that the actor served on.
    check_answers(&r.exchange(inbox, outbox, &message(9)), 9);
    assert!(r.stop(actor, Duration::from_millis(500)).failure.is_none());
    drop(r);
    assert_baseline(&host);
}

/// A grid that cannot be resident all at once is refused at once, naming the limit (the
/// emulator's 64 blocks; on a GPU, the driver's occupancy times its multiprocessors, which no
/// device reaches with 2^20 blocks); the lease goes on.
#[test]
fn a_grid_past_the_co_residency_limit_is_refused_naming_it() {
    let (grid, says) = match backend() {
        BackendKind::Emu => (65, "EMU_MAX_RESIDENT_CTAS = 64"),
        BackendKind::Cuda => (1 << 20, "blocks resident at once"),
    };
    let host = test_host!();
    let mut r = rig(&host);
    let began = Instant::now();
    refused(r.start("actor_deaf", None, grid), "launch-failed", says);
    assert!(began.elapsed() < Duration::from_secs(5));
    // Nothing was started: a launch that fits runs, and stops when asked.
    let (inbox, outbox, actor) = r.serving("actor_scale");
    check_answers(&r.exchange(inbox, outbox, &message(2)), 2);
    assert!(r.stop(actor, Duration::from_millis(500)).failure.is_none());
    drop(r);
    assert_baseline(&host);
}

/// A persistent launch is a cooperative one: `grid_sum`'s blocks meet at a grid-wide sync
/// (cooperative groups' `grid.sync`, which traps in a normal launch) across 32 blocks, block 0
/// adds their partial sums, and the kernel returns by itself with nothing failed.
#[test]
fn a_persistent_launch_syncs_its_whole_grid() {
    const GRID: u32 = 32;
    const FLOATS: u32 = 50_000;
    let host = test_host!();
    let mut r = rig(&host);
    // Small whole numbers: every partial sum and the total are exact in f32.
    let input: Vec<u8> = (0..FLOATS)
        .flat_map(|i| ((i % 5) as f32).to_le_bytes())
        .collect();
    let want: f32 = (0..FLOATS).map(|i| (i % 5) as f32).sum();
    let x = r.gpu.mem_alloc(r.s, input.len() as u64).expect("alloc");
    r.gpu.mem_write(r.s, x, 0, &input).expect("write");
    let out = r
        .gpu
        .mem_alloc(r.s, 4 * u64::from(GRID + 1))
        .expect("alloc");
    let config = LaunchConfig {
        grid: [GRID, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
    };
    let args = [
        ActorArg::Arg(KernelArg::Buffer {
            buffer: x,
            offset: 0,
        }),
        ActorArg::Arg(KernelArg::Buffer {
            buffer: out,
            offset: 0,
        }),
        ActorArg::Arg(KernelArg::U32(FLOATS)),
        ActorArg::Control,
    ];
    let actor = match r.op(ActorOp::Launch {
        module: r.actors,
        kernel: KernelRef::Named("grid_sum"),
        config: &config,
        args: &args,
    }) {
        Ok(ActorReply::Actor(id)) => id,
        other => panic!("an actor, got {other:?}"),
    };
    let s = r.ended(actor);
    assert!(s.failure.is_none(), "{s:?}");
    assert_eq!(s.messages_processed, 1, "{s:?}");
    let sums = floats(
        &r.gpu
            .mem_read(r.s, out, 0, 4 * u64::from(GRID + 1))
            .expect("read"),
    );
    assert_eq!(sums[GRID as usize], want, "the total block 0 added");
    assert_eq!(sums[..GRID as usize].iter().sum::<f32>(), want, "{sums:?}");
    // The lease goes on: a normal launch runs after it.
    let (add, xs, step) = add_step_setup(&mut r.gpu, r.s);
    r.launch_and_sync(add, xs, step);
    drop(r);
    assert_baseline(&host);
}

/// A kernel that writes ring counters no ring can have: the host's next send and receive on
/// those rings are `kernel-fault`s saying so, never reads past the slots.
#[test]
fn ring_counters_broken_by_a_kernel_are_a_kernel_fault() {
    let host = test_host!();
    let mut r = rig(&host);
    let inbox = r.ring(RingDirection::ToDevice);
    let outbox = r.ring(RingDirection::FromDevice);
    let m = r
        .gpu
        .module_load(r.s, COUNTERS_PTX)
        .expect("the counter kernels load");
    let actor = match r.op(ActorOp::Launch {
        module: m,
        kernel: KernelRef::Named("break_rings"),
        config: &one_block(),
        args: &[ActorArg::Ring(inbox), ActorArg::Ring(outbox)],
    }) {
        Ok(ActorReply::Actor(id)) => id,
        other => panic!("{other:?}"),
    };
    let s = r.ended(actor);
    assert!(s.failure.is_none(), "{s:?}");
    refused(
        r.op(ActorOp::Send {
            ring: inbox,
            messages: &message(0),
        }),
        "kernel-fault",
        "head - tail",
    );
    refused(
        r.op(ActorOp::Recv {
            ring: outbox,
            max: 4,
            wait: Duration::ZERO,
        }),
        "kernel-fault",
        "head - tail",
    );
    drop(r);
    assert_baseline(&host);
}

/// How many times the containment test measures the other tenant's latency after the kill,
/// until one is within 2× its baseline.
const AFTER_TRIES: usize = 10;

fn words(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
}

/// The median of `samples`.
fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Containment (issue 20, item 7): a tenant whose persistent kernels fault and ignore
/// `should_terminate` tells its own tasklet only. Another tenant's launch + sync loop runs before,
/// during and after without an error, and once the deaf kernel is killed its median latency is
/// within 2× its median before (the first of up to AFTER_TRIES tries that is: the suite's other
/// tests share the machine); the troublemaker's workers are gone and the books come back.
#[test]
fn a_faulting_or_deaf_actor_tells_its_own_tasklet_only() {
    let host = test_host!();
    let mut b = rig_on(service(&host, &manifest("testing/probe"), "bystander"));
    let (add, x, step) = add_step_setup(&mut b.gpu, b.s);
    b.gpu
        .mem_write(b.s, x, 0, &[0; 4 * N as usize])
        .expect("write");
    // Every launch the other tenant makes, counted, so that its data can be checked at the end.
    let launches = std::cell::Cell::new(0u32);
    let loop_of = |b: &mut Rig, n: usize| -> Vec<Duration> {
        (0..n)
            .map(|i| {
                launches.set(launches.get() + 1);
                let began = Instant::now();
                launch_add_step(&mut b.gpu, b.s, add, x, step)
                    .unwrap_or_else(|e| panic!("the other tenant's launch {i} failed: {e}"));
                began.elapsed()
            })
            .collect()
    };
    loop_of(&mut b, 20); // warm
    let before = median(loop_of(&mut b, 200));

    // The troublemaker, on a thread of its own: a faulting actor on one lease, a deaf one on
    // another, stopped with a short grace.
    let alone = host.accounting();
    let bystander = host.lease_worker_pids();
    let host = Arc::new(host);
    let troublemaker = {
        let host = Arc::clone(&host);
        let bystander = bystander.clone();
        std::thread::spawn(move || {
            let theirs = |host: &Host| -> Vec<u32> {
                let mut pids = host.lease_worker_pids();
                pids.retain(|p| !bystander.contains(p));
                pids
            };
            let mut a = rig_on(service(&host, &persistent_manifest(2), "troublemaker"));
            let mut pids = theirs(&host);
            let (inbox, _, faulty) = a.serving("actor_fault");
            let mut bad = message(0);
            bad[..4].copy_from_slice(&(-1.0f32).to_le_bytes());
            a.send(inbox, &bad);
            let faulted = a.ended(faulty);
            let mut d = rig_on(a.gpu);
            pids.extend(theirs(&host));
            let deaf = d.start("actor_deaf", None, 1).expect("starts");
            std::thread::sleep(Duration::from_millis(300));
            let stopped = d.stop(deaf, Duration::from_millis(200));
            drop(d);
            (faulted, stopped, pids)
        })
    };
    let mut during = Vec::new();
    let began = Instant::now();
    while !troublemaker.is_finished() {
        assert!(began.elapsed() < BOUND, "the troublemaker did not finish");
        during.extend(loop_of(&mut b, 5));
    }
    let (faulted, stopped, pids) = troublemaker.join().expect("the troublemaker's thread");
    // Its workers are gone, and its leases and memory with them: the books are the other
    // tenant's alone again.
    assert!(!pids.is_empty());
    assert!(
        eventually(BOUND, || pids.iter().all(|&p| !pid_alive(p))),
        "the troublemaker's workers {pids:?} survived"
    );
    assert!(
        eventually(Duration::from_secs(2), || host.accounting() == alone),
        "{:?}, the other tenant alone: {alone:?}",
        host.accounting()
    );
    assert_eq!(
        host.lease_worker_pids(),
        bystander,
        "the other tenant's worker"
    );
    assert!(faulted.failure.is_some(), "{faulted:?}");
    assert!(
        stopped
            .failure
            .as_deref()
            .is_some_and(|f| f.contains("did not return")),
        "{stopped:?}"
    );
    let during = median(during);
    // Other tests of the suite share this machine's cores and come and go: a try that they
    // slowed is followed by another, a little later (at most AFTER_TRIES, within BOUND).
    let mut after = Vec::new();
    let began = Instant::now();
    while after.len() < AFTER_TRIES && began.elapsed() < BOUND {
        after.push(median(loop_of(&mut b, 100)));
        if after.last().is_some_and(|&a| a <= before * 2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "actors: the other tenant's launch + sync median: {before:?} before, {during:?} during, \
         {after:?} after (tries)"
    );
    let best = after.iter().min().copied().expect("a try");
    assert!(
        best <= before * 2,
        "the other tenant's latency after the kill, {best:?}, is over 2× its {before:?} before"
    );
    // Its data is what its own launches made of it (each x = 3x + 1, from 0): none was lost or
    // disturbed.
    let got = b
        .gpu
        .mem_read(b.s, x, 0, 4 * u64::from(N))
        .expect("the other tenant reads");
    let want = (0..launches.get()).fold(0u32, |x, _| x.wrapping_mul(3).wrapping_add(1));
    assert!(
        words(&got).all(|w| w == want),
        "the other tenant's data after {} launches is not {want}",
        launches.get()
    );
    drop(b);
    assert_baseline(&host);
}

/// The SDK in a tasklet: `actor <n>` serves `n` messages through actor_scale and stops it.
#[test]
fn a_tasklet_serves_messages_through_an_actor() {
    let host = test_host!();
    let lines = run_probe(&host, "actor 1000");
    let text: Vec<String> = lines
        .iter()
        .map(|(s, w, r)| format!("{s} {w} {r}"))
        .collect();
    assert_eq!(
        text,
        ["ok served 1000", "ok processed 1000", "ok stopped returned"],
        "{lines:#?}"
    );
    assert_baseline(&host);
}

/// The SDK in a tasklet: every misuse the SDK or the host refuses, one line each.
#[test]
fn a_tasklets_misuses_of_rings_and_actors_are_refused() {
    let host = test_host!();
    let lines = run_probe(&host, "actor-misuse");
    let text: Vec<String> = lines
        .iter()
        .map(|(s, w, r)| format!("{s} {w} {r}"))
        .collect();
    let expected = [
        // The SDK's own refusals are `invalid-input`; the rest are the host's.
        "ok message-size invalid-input",
        "ok capacity invalid-argument",
        "ok too-large quota-exceeded",
        "ok no-config invalid-input",
        "ok foreign-ring invalid-argument",
        "ok second-actor quota-exceeded",
        "ok send-wrong-way invalid-argument",
        "ok recv-too-long invalid-argument",
        "ok stop-too-long invalid-argument",
        "ok stopped returned",
    ];
    assert_eq!(text, expected, "{lines:#?}");
    assert_baseline(&host);
}
