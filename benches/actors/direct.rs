//! The host runtime's path with no guest: a `LocalGpu` over the bench's host (what a tasklet's
//! calls reach once the sandbox has let them through), with gpubench's grant. The same
//! operations as gpubench's actor commands, so that the guest's figure minus this one is the
//! sandbox's share.

use std::sync::Arc;
use std::time::Instant;

use tasklet_runtime::gpu::{
    ActorArg, ActorId, ActorOp, ActorReply, GpuService, KernelArg, KernelRef, LaunchConfig,
    LeaseId, LeaseRequest, LocalGpu, ModuleId, RingDirection, RingId, RingLayout, SessionId,
};
use tasklet_runtime::Host;
use tasklet_tests::manifest;

use crate::messages::{
    all_answer, answers, handler_control, handler_rings, message, persistent_kernel, ACTOR_PTX,
    ANSWER_AT, ANSWER_WAIT, CONTROL_AT, FACTOR, HANDLER_BYTES, IN_AT, KERNEL, MESSAGE_BYTES,
    OUT_AT, SLOTS, STOP_GRACE, THREADS, WARMUP,
};
use crate::stats::{lines, ring_lines, Lines};
use crate::Params;

const BLOCK: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [THREADS, 1, 1],
    shared_mem_bytes: 0,
};

struct Direct<'g> {
    gpu: &'g mut LocalGpu,
    session: SessionId,
    module: ModuleId,
}

pub fn measure(host: &Host, p: &Params) -> Result<Lines, String> {
    let grant = host.policy().grant(&manifest("testing/gpubench"));
    let mut gpu = LocalGpu::new(grant, Arc::clone(host.leases()));
    let lease = gpu
        .lease_acquire(LeaseRequest {
            min_vram: 1 << 20,
            secs: 600,
            device: None,
        })
        .map_err(|e| format!("lease: {e}"))?;
    let r = open(&mut gpu, lease).and_then(|(session, module)| {
        Direct {
            gpu: &mut gpu,
            session,
            module,
        }
        .run(p)
    });
    gpu.lease_drop(lease);
    r
}

/// A session on the lease with `actor.ptx` loaded.
fn open(gpu: &mut LocalGpu, lease: LeaseId) -> Result<(SessionId, ModuleId), String> {
    let session = gpu
        .session_open(lease)
        .map_err(|e| format!("session: {e}"))?;
    let module = gpu
        .module_load(session, ACTOR_PTX)
        .map_err(|e| format!("loading actor.ptx: {e}"))?;
    Ok((session, module))
}

impl Direct<'_> {
    fn run(&mut self, p: &Params) -> Result<Lines, String> {
        let (rtt, batches) = self.persistent(p, RingLayout::Plain)?;
        let (seq_rtt, seq_batches) = self.persistent(p, RingLayout::Sequenced)?;
        let (launch_sync, handler_rtt) = self.handler(p)?;
        let mut out = lines(rtt, batches, p.batch, launch_sync, handler_rtt);
        out.extend(ring_lines("seq_", seq_rtt, seq_batches, p.batch));
        Ok(out)
    }

    fn op(&mut self, op: ActorOp<'_>) -> Result<ActorReply, String> {
        self.gpu
            .actor_op(self.session, op)
            .map_err(|e| e.to_string())
    }

    fn ring(&mut self, direction: RingDirection, layout: RingLayout) -> Result<RingId, String> {
        match self.op(ActorOp::NewRing {
            direction,
            layout,
            message_size: MESSAGE_BYTES,
            capacity: SLOTS,
        })? {
            ActorReply::Ring(r) => Ok(r),
            other => Err(format!("a new ring answered {other:?}")),
        }
    }

    /// The round trips and the batches, with the kernel serving throughout; stopped after.
    fn persistent(
        &mut self,
        p: &Params,
        layout: RingLayout,
    ) -> Result<(Vec<u64>, Vec<u64>), String> {
        let inbox = self.ring(RingDirection::ToDevice, layout)?;
        let outbox = self.ring(RingDirection::FromDevice, layout)?;
        let args = [
            ActorArg::Ring(inbox),
            ActorArg::Ring(outbox),
            ActorArg::Control,
            ActorArg::Arg(KernelArg::F32(FACTOR)),
        ];
        let actor = match self.op(ActorOp::Launch {
            module: self.module,
            kernel: KernelRef::Named(persistent_kernel(layout)),
            config: &BLOCK,
            args: &args,
        })? {
            ActorReply::Actor(a) => a,
            other => return Err(format!("a persistent launch answered {other:?}")),
        };
        let r = self.exchange(p, inbox, outbox);
        let stopped = self.op(ActorOp::Stop {
            actor,
            grace: STOP_GRACE,
        });
        let _ = self.op(ActorOp::DropActor(actor));
        check_stopped(actor, stopped)?;
        r
    }

    fn exchange(
        &mut self,
        p: &Params,
        inbox: RingId,
        outbox: RingId,
    ) -> Result<(Vec<u64>, Vec<u64>), String> {
        let (mut request, mut answer) = (Vec::new(), Vec::new());
        let mut rtt = Vec::with_capacity(p.iters as usize);
        for k in 0..WARMUP + p.iters {
            request.clear();
            message(k, &mut request);
            crate::think(p.think_ns);
            let start = Instant::now();
            self.send(inbox, &request, 1)?;
            self.receive(outbox, 1, &mut answer)?;
            let t = start.elapsed();
            if !answers(k, &answer) {
                return Err("round trip: an answer differs from in * 2 + 1".into());
            }
            if k >= WARMUP {
                rtt.push(t.as_nanos() as u64);
            }
        }
        let mut batches = Vec::with_capacity(p.batches as usize);
        let mut first = 0u32;
        for i in 0..WARMUP.min(p.batches) + p.batches {
            request.clear();
            for j in 0..p.batch {
                message(first.wrapping_add(j), &mut request);
            }
            let start = Instant::now();
            self.send(inbox, &request, p.batch)?;
            self.receive(outbox, p.batch, &mut answer)?;
            let t = start.elapsed();
            if !all_answer(first, &answer) {
                return Err("batch: an answer differs from in * 2 + 1".into());
            }
            first = first.wrapping_add(p.batch);
            if i >= WARMUP.min(p.batches) {
                batches.push(t.as_nanos() as u64);
            }
        }
        Ok((rtt, batches))
    }

    /// Sends `n` messages; the inbox is empty between round trips and batches, so all fit.
    fn send(&mut self, ring: RingId, messages: &[u8], n: u32) -> Result<(), String> {
        match self.op(ActorOp::Send { ring, messages })? {
            ActorReply::Sent(sent) if sent == n => Ok(()),
            other => Err(format!("sending {n} messages answered {other:?}")),
        }
    }

    /// Receives exactly `n` answers: at most `n` receives, each waiting up to `ANSWER_WAIT`.
    fn receive(&mut self, ring: RingId, n: u32, into: &mut Vec<u8>) -> Result<(), String> {
        into.clear();
        let mut got = 0;
        while got < n {
            let bytes = match self.op(ActorOp::Recv {
                ring,
                max: n - got,
                wait: ANSWER_WAIT,
            })? {
                ActorReply::Messages(m) => m,
                other => return Err(format!("a receive answered {other:?}")),
            };
            if bytes.is_empty() {
                return Err(format!(
                    "{got} of {n} answers came within {ANSWER_WAIT:?} of waiting"
                ));
            }
            got += (bytes.len() / MESSAGE_BYTES as usize) as u32;
            into.extend_from_slice(&bytes);
        }
        Ok(())
    }

    /// The kernel as a normal kernel: launch + sync with the message put untimed, then write +
    /// launch + read.
    fn handler(&mut self, p: &Params) -> Result<(Vec<u64>, Vec<u64>), String> {
        let (g, s) = (&mut *self.gpu, self.session);
        let buf = g.mem_alloc(s, HANDLER_BYTES).map_err(|e| e.to_string())?;
        g.mem_write(s, buf, CONTROL_AT, &handler_control())
            .map_err(|e| e.to_string())?;
        let at = |offset| KernelArg::Buffer {
            buffer: buf,
            offset,
        };
        let args = [
            at(IN_AT),
            at(OUT_AT),
            at(CONTROL_AT),
            KernelArg::F32(FACTOR),
        ];
        let module = self.module;
        // Resolved once, as the guest's kernel handle is.
        let index = g
            .module_kernels(s, module)
            .iter()
            .position(|k| k == KERNEL)
            .ok_or("actor.ptx has no actor_scale")?;
        let kernel = KernelRef::At(index as u32);
        let mut rings = Vec::new();
        let mut launch_sync = Vec::with_capacity(p.iters as usize);
        for k in 0..WARMUP + p.iters {
            handler_rings(k, &mut rings);
            g.mem_write(s, buf, 0, &rings).map_err(|e| e.to_string())?;
            g.sync(s).map_err(|e| e.to_string())?;
            let start = Instant::now();
            g.launch_kernel(s, module, kernel, &BLOCK, &args)
                .and_then(|_| g.sync(s))
                .map_err(|e| format!("launch + sync: {e}"))?;
            let t = start.elapsed();
            if k >= WARMUP {
                launch_sync.push(t.as_nanos() as u64);
            }
        }
        let last = g
            .mem_read(s, buf, ANSWER_AT, u64::from(MESSAGE_BYTES))
            .map_err(|e| e.to_string())?;
        if !answers(WARMUP + p.iters - 1, &last) {
            return Err("launch + sync: the answer differs from in * 2 + 1".into());
        }
        let mut rtt = Vec::with_capacity(p.iters as usize);
        for k in 0..WARMUP + p.iters {
            handler_rings(k, &mut rings);
            let start = Instant::now();
            let back = g
                .mem_write(s, buf, 0, &rings)
                .and_then(|()| g.launch_kernel(s, module, kernel, &BLOCK, &args))
                .and_then(|_| g.mem_read(s, buf, ANSWER_AT, u64::from(MESSAGE_BYTES)))
                .map_err(|e| format!("write + launch + read: {e}"))?;
            let t = start.elapsed();
            if !answers(k, &back) {
                return Err("write + launch + read: the answer differs from in * 2 + 1".into());
            }
            if k >= WARMUP {
                rtt.push(t.as_nanos() as u64);
            }
        }
        g.mem_free(s, buf);
        Ok((launch_sync, rtt))
    }
}

fn check_stopped(actor: ActorId, r: Result<ActorReply, String>) -> Result<(), String> {
    match r? {
        ActorReply::Status(s) if s.failure.is_none() && s.has_terminated => Ok(()),
        ActorReply::Status(s) => Err(format!(
            "actor {}: did not return cleanly when asked: {s:?}",
            actor.0
        )),
        other => Err(format!("stopping actor {} answered {other:?}", actor.0)),
    }
}
