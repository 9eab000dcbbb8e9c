//! Contract 0.2's rings and persistent kernels: handles over the service's ids. Every check is
//! the service's (`ActorOp`); a ring or actor handle of another session is refused there.

use super::*;
use crate::gpu::{ActorArg, ActorOp, ActorReply, RingDirection as Direction, RingLayout};
use crate::wit::bindings::v02::tasklet::gpu::sessions::{
    ActorArg as WitActorArg, ActorStatus, HostActor, HostRing, RingDirection,
};
use crate::wit::{ActorHandle, RingHandle};
use std::time::Duration;

/// An answer of a kind the operation does not give: a broken service, not the guest's doing.
fn unexpected(reply: ActorReply) -> GpuFailure {
    GpuFailure::Trap(wasmtime::Error::msg(format!(
        "the GPU service answered a ring or actor operation with {reply:?}"
    )))
}

fn status(s: gpu::ActorStatus) -> ActorStatus {
    ActorStatus {
        is_active: s.is_active,
        should_terminate: s.should_terminate,
        has_terminated: s.has_terminated,
        errors_encountered: s.errors_encountered,
        messages_processed: s.messages_processed,
        failure: s.failure,
    }
}

impl GpuState<'_> {
    pub(super) fn new_ring_of(
        &mut self,
        session: &Resource<SessionHandle>,
        direction: RingDirection,
        layout: RingLayout,
        message_size: u32,
        capacity: u32,
    ) -> GpuResult<Resource<RingHandle>> {
        let session = self.session_id(session)?;
        let direction = match direction {
            RingDirection::ToDevice => Direction::ToDevice,
            RingDirection::FromDevice => Direction::FromDevice,
        };
        let op = ActorOp::NewRing {
            direction,
            layout,
            message_size,
            capacity,
        };
        match self.service.actor_op(session, op)? {
            ActorReply::Ring(id) => Ok(self.table.push(RingHandle {
                id,
                session,
                message_size,
                capacity,
            })?),
            other => Err(unexpected(other)),
        }
    }

    pub(super) fn launch_persistent_of(
        &mut self,
        session: &Resource<SessionHandle>,
        kernel: &Resource<KernelHandle>,
        config: &LaunchConfig,
        args: &[WitActorArg],
    ) -> GpuResult<Resource<ActorHandle>> {
        let session = self.session_id(session)?;
        let (module, index) = self.kernel_of(session, kernel)?;
        let config = lift_config(config);
        let mut resolved = Vec::new();
        for arg in args {
            if let WitActorArg::Arg(a) = arg {
                relocations(self, a, &mut resolved)?;
            }
        }
        let mut rest: &[gpu::Relocation] = &resolved;
        let mut lifted = Vec::with_capacity(args.len());
        for arg in args {
            lifted.push(match arg {
                WitActorArg::Arg(a) => ActorArg::Arg(lift_arg(self, a, &mut rest)?),
                WitActorArg::Ring(r) => ActorArg::Ring(self.table.get(r)?.id),
                WitActorArg::Control => ActorArg::Control,
            });
        }
        let op = ActorOp::Launch {
            module,
            kernel: gpu::KernelRef::At(index),
            config: &config,
            args: &lifted,
        };
        match self.service.actor_op(session, op)? {
            ActorReply::Actor(id) => Ok(self.table.push(ActorHandle { id, session })?),
            other => Err(unexpected(other)),
        }
    }
}

impl HostRing for GpuState<'_> {
    fn message_size(&mut self, this: Resource<RingHandle>) -> wasmtime::Result<u32> {
        Ok(self.table.get(&this)?.message_size)
    }

    fn capacity(&mut self, this: Resource<RingHandle>) -> wasmtime::Result<u32> {
        Ok(self.table.get(&this)?.capacity)
    }

    fn send(&mut self, this: Resource<RingHandle>, messages: Vec<u8>) -> GpuResult<u32> {
        let r = self.table.get(&this)?;
        let (session, ring) = (r.session, r.id);
        let op = ActorOp::Send {
            ring,
            messages: &messages,
        };
        match self.service.actor_op(session, op)? {
            ActorReply::Sent(n) => Ok(n),
            other => Err(unexpected(other)),
        }
    }

    fn recv(
        &mut self,
        this: Resource<RingHandle>,
        max: u32,
        timeout_us: u64,
    ) -> GpuResult<Vec<u8>> {
        let r = self.table.get(&this)?;
        let (session, ring) = (r.session, r.id);
        let op = ActorOp::Recv {
            ring,
            max,
            wait: Duration::from_micros(timeout_us),
        };
        match self.service.actor_op(session, op)? {
            ActorReply::Messages(m) => Ok(m),
            other => Err(unexpected(other)),
        }
    }

    fn drop(&mut self, this: Resource<RingHandle>) -> wasmtime::Result<()> {
        let r = self.table.delete(this)?;
        // A session already gone took its rings with it.
        let _ = self.service.actor_op(r.session, ActorOp::DropRing(r.id));
        Ok(())
    }
}

impl HostActor for GpuState<'_> {
    fn status(&mut self, this: Resource<ActorHandle>) -> GpuResult<ActorStatus> {
        let a = self.table.get(&this)?;
        let (session, id) = (a.session, a.id);
        match self.service.actor_op(session, ActorOp::Status(id))? {
            ActorReply::Status(s) => Ok(status(s)),
            other => Err(unexpected(other)),
        }
    }

    fn stop(&mut self, this: Resource<ActorHandle>, grace_ms: u32) -> GpuResult<ActorStatus> {
        let a = self.table.get(&this)?;
        let (session, actor) = (a.session, a.id);
        let op = ActorOp::Stop {
            actor,
            grace: Duration::from_millis(grace_ms.into()),
        };
        match self.service.actor_op(session, op)? {
            ActorReply::Status(s) => Ok(status(s)),
            other => Err(unexpected(other)),
        }
    }

    fn drop(&mut self, this: Resource<ActorHandle>) -> wasmtime::Result<()> {
        let a = self.table.delete(this)?;
        // Stops it first (see the service); a session already gone took it with it.
        let _ = self.service.actor_op(a.session, ActorOp::DropActor(a.id));
        Ok(())
    }
}
