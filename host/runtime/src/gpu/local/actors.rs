//! Rings and persistent kernels on a [`LocalGpu`].
//!
//! A lease that makes its first ring or actor gets a mapped area (`MappedArea`, at most
//! [`MAX_LEASE_MAPPED_BYTES`]): memory this process and the lease's worker both map, which the
//! worker makes visible to kernels once. Rings and control blocks are cut from it. Sending and
//! receiving are loads and stores here, in the host's mapping, with no request to the worker:
//! the kernel sees them through the device's mapping (cuda: PCIe; the emulator: the same pages).
//!
//! What a kernel writes there is untrusted: a ring's counters are checked against its capacity
//! before use, and a control block is only read. An actor that does not return within its grace
//! period once asked ends with its worker, and the lease with it ([`EndReason::ActorUnstoppable`]);
//! so does one whose lease ends while it runs (`LeaseManager::end`).

use super::LocalGpu;
use crate::config::Right;
use crate::error::{invalid, quota, GpuError};
use crate::gpu::actors::{
    ActorArg, ActorId, ActorOp, ActorReply, ActorStatus, RingDirection, RingId, RingLayout,
    MAX_LEASE_MAPPED_BYTES, MAX_MESSAGE_BYTES, MAX_RECV_WAIT, MAX_SESSION_RINGS, MAX_STOP_GRACE,
};
use crate::gpu::types::{
    BufferId, KernelArg, KernelRef, LaunchConfig, LeaseId, ModuleId, SessionId,
};
use crate::lease::{EndReason, PERSISTENT_GRACE};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tasklet_worker::contract::actor::{ring_bytes, Exit, Ring, CONTROL_BYTES};
use tasklet_worker::host::mapped::{ActorView, MappedArea};
use tasklet_worker::Launch;

/// A lease's mapped area and where kernels see its first byte.
pub(super) struct Area {
    mapped: Arc<MappedArea>,
    device_base: u64,
}

impl Area {
    fn device(&self, offset: usize) -> u64 {
        self.device_base + offset as u64
    }
}

/// A session's rings and actors.
#[derive(Default)]
pub(super) struct Actors {
    rings: FxHashMap<RingId, RingEntry>,
    actors: FxHashMap<ActorId, ActorEntry>,
    /// Pieces of dropped rings that a running actor of the session may still use: given back
    /// once none runs.
    retired: Vec<(usize, usize)>,
    /// When the GPU time of the session's running actors was last looked at (see
    /// [`LocalGpu::police`]).
    looked: Option<Instant>,
}

/// How long a receive polls its ring without a pause before it sleeps between polls: a round
/// trip through a persistent kernel takes microseconds on a GPU, and a sleep costs tens.
const RECV_SPIN: Duration = Duration::from_micros(200);

/// The most bytes a receive sets aside before anything came (more grows the vector as usual).
const RECV_PRESIZE: usize = 64 << 10;

/// Polls of a ring between two looks at everything else a receive watches (the lease alive, the
/// quota, a kernel still running, the clock): a poll is a read of the ring's words, which sees an
/// answer within a few dozen nanoseconds of its landing only if nothing else runs between polls
/// (a look takes the clock twice and a lock, ~0.3 µs on a VM). 64 polls are a few microseconds.
const POLLS_PER_LOOK: u32 = 64;

/// How often a session whose actors run asks its worker for the GPU time they have taken, so
/// that a `gpu-seconds` quota bites while the tasklet only sends and receives.
const QUOTA_LOOK: Duration = Duration::from_millis(50);

struct RingEntry {
    /// Keeps the memory `ring` views mapped, whatever happens to the lease.
    _area: Arc<MappedArea>,
    offset: usize,
    bytes: usize,
    direction: RingDirection,
    ring: Ring,
}

struct ActorEntry {
    /// Where its control block is in the lease's area.
    control: usize,
    /// Its control block and status block (the view keeps them mapped, whatever happens to
    /// the lease).
    view: ActorView,
    /// Why it ended other than by returning, when the host ended it (its worker, its lease).
    ended_by_host: Option<String>,
}

impl Actors {
    fn ring(&self, id: RingId) -> Result<&RingEntry, GpuError> {
        self.rings.get(&id).ok_or_else(|| {
            invalid(format!(
                "ring {} belongs to another session, or was dropped; a ring is usable only in the session that made it",
                id.0
            ))
        })
    }

    fn actor(&self, id: ActorId) -> Result<&ActorEntry, GpuError> {
        self.actors.get(&id).ok_or_else(|| {
            invalid(format!(
                "actor {} belongs to another session, or was dropped; an actor is usable only in the session that \
                 launched it",
                id.0
            ))
        })
    }

    fn running(&self) -> usize {
        self.actors
            .values()
            .filter(|a| a.ended_by_host.is_none() && !a.view.block().ended())
            .count()
    }
}

/// The service's areas, by lease.
#[derive(Default)]
pub(super) struct Areas(FxHashMap<LeaseId, Area>);

impl Areas {
    /// Forgets a lease's area (its lease is gone). The memory stays while a worker still holds
    /// it.
    pub(super) fn forget(&mut self, lease: LeaseId) {
        self.0.remove(&lease);
    }
}

fn status_of(a: &ActorEntry) -> ActorStatus {
    let s = a.view.block().snapshot();
    let failure = match (&s.exit, &a.ended_by_host) {
        (Exit::Faulted(why), _) => Some(why.clone()),
        (Exit::Running, Some(why)) => Some(why.clone()),
        _ => None,
    };
    let ended_by_host = a.ended_by_host.is_some() && s.exit == Exit::Running;
    ActorStatus {
        is_active: s.is_active && !ended_by_host,
        should_terminate: s.should_terminate,
        has_terminated: s.has_terminated || ended_by_host,
        errors_encountered: s.errors_encountered,
        messages_processed: s.messages_processed,
        failure,
    }
}

/// A ring's counters broken by the kernel: its own tasklet's doing, reported as a fault of its
/// kernel.
fn broken(e: tasklet_worker::contract::actor::BrokenRing) -> GpuError {
    GpuError::KernelFault(format!(
        "{e}: a kernel wrote counters no ring can have (head is the producer's, tail the consumer's; head - tail \
         is at most the capacity)"
    ))
}

impl LocalGpu {
    pub(super) fn actor_op_local(
        &mut self,
        session: SessionId,
        op: ActorOp<'_>,
    ) -> Result<ActorReply, GpuError> {
        self.need(Right::Persistent)?;
        match op {
            ActorOp::NewRing {
                direction,
                layout,
                message_size,
                capacity,
            } => self.new_ring(session, direction, layout, message_size, capacity),
            ActorOp::Send { ring, messages } => {
                self.police(session)?;
                let s = self.live_session(session)?;
                let r = s.actors.ring(ring)?;
                if r.direction != RingDirection::ToDevice {
                    return Err(invalid(
                        "this ring carries messages from the device; send on a to-device ring",
                    ));
                }
                let size = r.ring.message_size() as usize;
                if messages.len() % size != 0 {
                    return Err(invalid(format!(
                        "{} bytes are not whole messages of {size} bytes",
                        messages.len()
                    )));
                }
                Ok(ActorReply::Sent(r.ring.push(messages).map_err(broken)?))
            }
            ActorOp::Recv { ring, max, wait } => self.recv(session, ring, max, wait),
            ActorOp::DropRing(ring) => {
                let area = self.area_of(session);
                if let Some(s) = self.sessions.get_mut(&session) {
                    if let Some(r) = s.actors.rings.remove(&ring) {
                        if s.actors.running() > 0 {
                            s.actors.retired.push((r.offset, r.bytes));
                        } else if let Some(area) = area {
                            area.give_back(r.offset, r.bytes);
                        }
                    }
                }
                Ok(ActorReply::Done)
            }
            ActorOp::Launch {
                module,
                kernel,
                config,
                args,
            } => self.launch_actor(session, module, kernel, config, args),
            ActorOp::Status(actor) => {
                // A quota that ran out ends the lease: the status then says so.
                let _ = self.police(session);
                let s = self.session(session)?;
                let a = s.actors.actor(actor)?;
                let mut status = status_of(a);
                if status.is_active {
                    // Its worker or lease gone shows here, not only once someone stops it.
                    if let Err(e) = self.manager.with_worker(&s.lease, |_| Ok(())) {
                        status.is_active = false;
                        status.has_terminated = true;
                        status.failure = Some(e.to_string());
                    }
                }
                Ok(ActorReply::Status(status))
            }
            ActorOp::Stop { actor, grace } => self.stop_actor(session, actor, grace),
            ActorOp::DropActor(actor) => {
                if self.session(session)?.actors.actors.contains_key(&actor) {
                    self.stop_actor(session, actor, PERSISTENT_GRACE)?;
                }
                let area = self.area_of(session);
                if let Some(s) = self.sessions.get_mut(&session) {
                    if let (Some(a), Some(area)) = (s.actors.actors.remove(&actor), area.as_ref()) {
                        // An actor the host ended went with its worker: its block is not reused
                        // under a lease that is over anyway.
                        if a.view.block().ended() {
                            area.give_back(a.control, CONTROL_BYTES);
                        }
                    }
                    if s.actors.running() == 0 {
                        if let Some(area) = area {
                            for (offset, bytes) in s.actors.retired.drain(..) {
                                area.give_back(offset, bytes);
                            }
                        }
                    }
                }
                Ok(ActorReply::Done)
            }
        }
    }

    /// Holds a running actor to the holder's `gpu-seconds` quota: at most every [`QUOTA_LOOK`]
    /// while the session's actors run, the lease's worker is asked for the GPU time so far (a
    /// persistent kernel is charged as it runs) and, once the quota is used, the lease ends with
    /// its worker, its kernels with it, and the quota's error is returned.
    fn police(&mut self, session: SessionId) -> Result<(), GpuError> {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Ok(());
        };
        if self.usage.check().is_ok_and(|left| left.is_none()) || s.actors.running() == 0 {
            return Ok(());
        }
        let now = Instant::now();
        if s.actors
            .looked
            .is_some_and(|t| now.duration_since(t) < QUOTA_LOOK)
        {
            return Ok(());
        }
        s.actors.looked = Some(now);
        let lease = Arc::clone(&s.lease);
        // A lost worker shows at the next operation; here only the charge matters.
        let _ = self.manager.gpu_time(&lease, true);
        if let Err(e) = self.usage.check() {
            self.manager.end(&lease, EndReason::GpuTimeQuota);
            return Err(e);
        }
        Ok(())
    }

    /// The session, its lease checked live (so a ring of an ended lease is refused saying why).
    fn live_session(&self, session: SessionId) -> Result<&super::Session, GpuError> {
        let s = self.session(session)?;
        self.manager.with_worker(&s.lease, |_| Ok(()))?;
        Ok(s)
    }

    fn area_of(&self, session: SessionId) -> Option<Arc<MappedArea>> {
        let lease = self.sessions.get(&session)?.lease_id;
        self.areas.0.get(&lease).map(|a| Arc::clone(&a.mapped))
    }

    /// The session's lease's area, made (and mapped for its kernels) at first use.
    fn area(&mut self, session: SessionId) -> Result<(LeaseId, &Area), GpuError> {
        let s = self.live_session(session)?;
        let lease_id = s.lease_id;
        if !self.areas.0.contains_key(&lease_id) {
            let mapped = MappedArea::create(MAX_LEASE_MAPPED_BYTES).map_err(|e| {
                GpuError::CapacityExceeded(format!(
                    "this host cannot make mapped memory for the lease's rings now: {e}"
                ))
            })?;
            let whole = mapped.whole();
            let lease = Arc::clone(&s.lease);
            let device_base = self.run(&lease, |w| w.map_device(&whole))?;
            self.areas.0.insert(
                lease_id,
                Area {
                    mapped: Arc::new(mapped),
                    device_base,
                },
            );
        }
        Ok((lease_id, &self.areas.0[&lease_id]))
    }

    fn new_ring(
        &mut self,
        session: SessionId,
        direction: RingDirection,
        layout: RingLayout,
        message_size: u32,
        capacity: u32,
    ) -> Result<ActorReply, GpuError> {
        if message_size == 0 || !message_size.is_multiple_of(4) || message_size > MAX_MESSAGE_BYTES
        {
            return Err(invalid(format!(
                "a ring's message size is a multiple of 4 bytes from 4 to {MAX_MESSAGE_BYTES}; {message_size} is not"
            )));
        }
        if capacity == 0 || !capacity.is_power_of_two() {
            return Err(invalid(format!(
                "a ring's capacity is a power of two (1, 2, 4, …); {capacity} is not"
            )));
        }
        let bytes = ring_bytes(layout, capacity, message_size)
            .filter(|&b| b <= MAX_LEASE_MAPPED_BYTES)
            .ok_or_else(|| {
                let sequenced = match layout {
                    RingLayout::Plain => "",
                    RingLayout::Sequenced => " (sequenced: two bytes of slot a byte)",
                };
                quota(format!(
                    "a ring of {capacity} messages of {message_size} bytes{sequenced} is larger than a lease's {} MiB \
                     of mapped memory; make it smaller",
                    MAX_LEASE_MAPPED_BYTES >> 20
                ))
            })?;
        if self.session(session)?.actors.rings.len() >= MAX_SESSION_RINGS {
            return Err(invalid(format!(
                "a session holds at most {MAX_SESSION_RINGS} rings; drop one first"
            )));
        }
        let (_, area) = self.area(session)?;
        let offset = area.mapped.take(bytes).ok_or_else(|| {
            quota(format!(
                "the lease's {} MiB of mapped memory has no room for a ring of {bytes} bytes ({} bytes free); drop a \
                 ring or make this one smaller",
                MAX_LEASE_MAPPED_BYTES >> 20,
                area.mapped.free_bytes()
            ))
        })?;
        // SAFETY: the piece is `bytes` long, 256-aligned, inside the area, which the session's
        // lease keeps mapped while the ring is used; capacity and size were checked above.
        let ring =
            unsafe { Ring::create(area.mapped.host_ptr(offset), layout, capacity, message_size) };
        let mapped = Arc::clone(&area.mapped);
        let id = RingId(self.ids.fresh());
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or_else(|| invalid(format!("no session {session} here")))?;
        s.actors.rings.insert(
            id,
            RingEntry {
                _area: mapped,
                offset,
                bytes,
                direction,
                ring,
            },
        );
        Ok(ActorReply::Ring(id))
    }

    fn recv(
        &mut self,
        session: SessionId,
        ring: RingId,
        max: u32,
        wait: Duration,
    ) -> Result<ActorReply, GpuError> {
        let s = self.live_session(session)?;
        let r = s.actors.ring(ring)?;
        if r.direction != RingDirection::FromDevice {
            return Err(invalid(
                "this ring carries messages to the device; receive on a from-device ring",
            ));
        }
        if wait > MAX_RECV_WAIT {
            return Err(invalid(format!(
                "a receive waits at most {MAX_RECV_WAIT:?}; {wait:?} asked"
            )));
        }
        let max = max.min(r.ring.capacity());
        // The view is polled without the session's books between looks; the area stays mapped
        // for as long as this holds it, whatever happens to the lease meanwhile.
        let (view, _mapped) = (r.ring, Arc::clone(&r._area));
        // Room for what may come, so that taking it does not grow the vector step by step.
        let room = (max as usize).saturating_mul(view.message_size() as usize);
        let mut out = Vec::with_capacity(room.min(RECV_PRESIZE));
        let start = Instant::now();
        let mut until = start + wait;
        if let Some(run) = &self.run {
            until = until.min(run.ends);
        }
        // A reply is often microseconds away (a PCIe round trip on a GPU): poll without a pause
        // for RECV_SPIN, then sleep in growing steps.
        let spin_until = start + RECV_SPIN;
        let mut pause = Duration::from_micros(20);
        let mut polls = 0u32;
        loop {
            let n = view.pop(max, &mut out).map_err(broken)?;
            if n > 0 || max == 0 {
                return Ok(ActorReply::Messages(out));
            }
            polls = polls.wrapping_add(1);
            if polls % POLLS_PER_LOOK != 1 {
                std::hint::spin_loop();
                continue;
            }
            self.police(session)?;
            let s = self.live_session(session)?;
            s.actors.ring(ring)?;
            // Nothing more can come when no kernel of the session runs.
            if s.actors.running() == 0 {
                return Ok(ActorReply::Messages(out));
            }
            let now = Instant::now();
            if now >= until {
                return Ok(ActorReply::Messages(out));
            }
            if now >= spin_until {
                std::thread::sleep(pause.min(until - now));
                pause = (pause * 2).min(Duration::from_millis(1));
                // After a sleep, look again at once.
                polls = 0;
            }
        }
    }

    fn launch_actor(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[ActorArg<'_>],
    ) -> Result<ActorReply, GpuError> {
        self.need(Right::Launch)?;
        let running: usize = self.sessions.values().map(|s| s.actors.running()).sum();
        let most = self.grant.gpu.max_persistent as usize;
        if running >= most {
            return Err(quota(format!(
                "{running} persistent kernel(s) run already, the most this tasklet may hold at once is {most}; stop \
                 one, or raise `max-persistent` under [gpu] in the manifest (the node policy caps it)"
            )));
        }
        // One at a time per lease, alike on every backend (a worker runs one on cuda): another
        // needs another lease.
        let lease_id = self.session(session)?.lease_id;
        let on_lease: usize = self
            .sessions
            .values()
            .filter(|s| s.lease_id == lease_id)
            .map(|s| s.actors.running())
            .sum();
        if on_lease > 0 {
            return Err(quota(
                "the lease runs a persistent kernel already, and a lease runs one at a time; stop it, or acquire \
                 another lease for another",
            ));
        }
        let (lease_id, area) = self.area(session)?;
        let control = area.mapped.take(CONTROL_BYTES).ok_or_else(|| {
            quota(format!(
                "the lease's {} MiB of mapped memory has no room for a control block; drop a ring",
                MAX_LEASE_MAPPED_BYTES >> 20
            ))
        })?;
        let (mapped, control_addr) = (Arc::clone(&area.mapped), area.device(control));
        let r = self.start_actor(
            session,
            lease_id,
            module,
            kernel,
            config,
            args,
            &mapped,
            control,
            control_addr,
        );
        match r {
            Ok(id) => Ok(ActorReply::Actor(id)),
            Err(e) => {
                mapped.give_back(control, CONTROL_BYTES);
                Err(e)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_actor(
        &mut self,
        session: SessionId,
        lease_id: LeaseId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[ActorArg<'_>],
        mapped: &Arc<MappedArea>,
        control: usize,
        control_addr: u64,
    ) -> Result<ActorId, GpuError> {
        // Rings and the control block go as buffers (a pointer parameter takes only buffers):
        // a ring under its own id, the control block under an id of its own, both resolved
        // below to where kernels see them. Ids come from one unguessable source: no buffer has
        // either.
        let control_id = BufferId(self.ids.fresh());
        let area = &self.areas.0[&lease_id];
        let s = self.session(session)?;
        let mut lifted = Vec::with_capacity(args.len());
        for arg in args {
            lifted.push(match *arg {
                ActorArg::Arg(a) => a,
                ActorArg::Ring(id) => {
                    s.actors.ring(id)?;
                    KernelArg::Buffer {
                        buffer: BufferId(id.0),
                        offset: 0,
                    }
                }
                ActorArg::Control => KernelArg::Buffer {
                    buffer: control_id,
                    offset: 0,
                },
            });
        }
        let resolve = |id: BufferId| {
            if id == control_id {
                return Ok((control_addr, CONTROL_BYTES as u64));
            }
            match s.actors.rings.get(&RingId(id.0)) {
                Some(r) => Ok((area.device(r.offset), r.bytes as u64)),
                None => s.buffer(id),
            }
        };
        let (m, index) = s.kernel(module, kernel)?;
        let mut block = Vec::new();
        m.kernels[index].argument_block(&lifted, resolve, &mut block)?;
        self.check_limits(&s.lease, &m.kernels[index].info.name, config, block.len())?;
        let launch = Launch {
            module: m.id,
            kernel: index as u32,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: &block,
            // Exempt from it, but every launch carries one.
            deadline: self.grant.kernel_deadline.max(Duration::from_millis(1)),
        };
        let lease = Arc::clone(&s.lease);
        // The view reads the kernel's end from the worker's status block, which no kernel can
        // write: a kernel cannot pretend to have ended (and so escape max-persistent).
        let view = self.run(&lease, |w| {
            w.launch_persistent(&launch, mapped, control)?;
            w.persistent_view(mapped, control).ok_or_else(|| {
                tasklet_worker::WorkerError::Lost(
                    "the worker forgot the persistent kernel it had just started".into(),
                )
            })
        })?;
        self.usage.launched();
        let id = ActorId(self.ids.fresh());
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or_else(|| invalid(format!("no session {session} here")))?;
        s.actors.actors.insert(
            id,
            ActorEntry {
                control,
                view,
                ended_by_host: None,
            },
        );
        Ok(id)
    }

    fn stop_actor(
        &mut self,
        session: SessionId,
        actor: ActorId,
        grace: Duration,
    ) -> Result<ActorReply, GpuError> {
        if grace > MAX_STOP_GRACE {
            return Err(invalid(format!(
                "a stop gives a kernel at most {MAX_STOP_GRACE:?} to return; {grace:?} asked"
            )));
        }
        let s = self.session(session)?;
        let a = s.actors.actor(actor)?;
        if a.ended_by_host.is_none() && !a.view.block().ended() {
            a.view.block().ask_to_terminate();
            // Never past the run's wall time: a host call cannot be interrupted.
            let mut until = Instant::now() + grace;
            if let Some(run) = &self.run {
                until = until.min(run.ends);
            }
            let mut pause = Duration::from_micros(20);
            while !a.view.block().ended() && Instant::now() < until {
                if self.manager.with_worker(&s.lease, |_| Ok(())).is_err() {
                    break;
                }
                std::thread::sleep(pause.min(until.saturating_duration_since(Instant::now())));
                pause = (pause * 2).min(Duration::from_millis(5));
            }
            if !a.view.block().ended() {
                // It did not return (or its worker is gone): the worker ends, and the lease.
                let lease = Arc::clone(&s.lease);
                let why = match lease.end_reason() {
                    Some(_) => self
                        .manager
                        .with_worker(&lease, |_| Ok(()))
                        .err()
                        .map_or_else(|| "its lease ended".to_string(), |e| e.to_string()),
                    None => {
                        self.manager.end(&lease, EndReason::ActorUnstoppable(grace));
                        format!(
                            "the kernel did not return within {grace:?} of being asked to stop; its worker was \
                             ended, and its lease with it"
                        )
                    }
                };
                if let Some(a) = self
                    .sessions
                    .get_mut(&session)
                    .and_then(|s| s.actors.actors.get_mut(&actor))
                {
                    a.ended_by_host = Some(why);
                }
            }
        }
        let s = self.session(session)?;
        Ok(ActorReply::Status(status_of(s.actors.actor(actor)?)))
    }

    /// Stops and forgets every actor and ring of a session being dropped.
    pub(super) fn drop_actors(&mut self, session: SessionId) {
        let (actors, rings): (Vec<ActorId>, Vec<RingId>) = match self.sessions.get(&session) {
            Some(s) => (
                s.actors.actors.keys().copied().collect(),
                s.actors.rings.keys().copied().collect(),
            ),
            None => return,
        };
        for actor in actors {
            let _ = self.actor_op_local(session, ActorOp::DropActor(actor));
        }
        for ring in rings {
            let _ = self.actor_op_local(session, ActorOp::DropRing(ring));
        }
    }
}
