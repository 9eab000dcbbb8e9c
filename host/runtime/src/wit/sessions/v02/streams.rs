//! Contract 0.2's streams and events: handles over the service's ids. A launch, write or read
//! naming a stream is the service's stream operation of that name, which checks the stream is
//! the session's and orders the work by the stream; a copy naming one is checked (through
//! `QueueOp::CheckStream`) and then is the session's copy.

use super::*;
use crate::gpu::{QueueOp, QueueReply};
use crate::wit::bindings::v02::tasklet::gpu::sessions::{HostEvent, HostGpuStream};
use crate::wit::{EventHandle, StreamHandle};

/// An answer of a kind the operation does not give: a broken service, not the guest's doing.
fn unexpected(reply: QueueReply) -> GpuFailure {
    GpuFailure::Trap(wasmtime::Error::msg(format!(
        "the GPU service answered a stream operation with {reply:?}"
    )))
}

impl GpuState<'_> {
    pub(super) fn new_stream_of(
        &mut self,
        session: &Resource<SessionHandle>,
    ) -> GpuResult<Resource<StreamHandle>> {
        let session = self.session_id(session)?;
        match self.service.queue_op(session, QueueOp::NewStream)? {
            QueueReply::Stream(id) => Ok(self.table.push(StreamHandle { id, session })?),
            other => Err(unexpected(other)),
        }
    }

    pub(super) fn new_event_of(
        &mut self,
        session: &Resource<SessionHandle>,
    ) -> GpuResult<Resource<EventHandle>> {
        let session = self.session_id(session)?;
        match self.service.queue_op(session, QueueOp::NewEvent)? {
            QueueReply::Event(id) => Ok(self.table.push(EventHandle { id, session })?),
            other => Err(unexpected(other)),
        }
    }

    /// The stream's session, once the service has checked the stream is still the session's.
    fn stream_session(&mut self, stream: &Resource<StreamHandle>) -> GpuResult<gpu::SessionId> {
        let (session, id) = self.stream_ids(stream)?;
        self.service.queue_op(session, QueueOp::CheckStream(id))?;
        Ok(session)
    }

    /// The stream's session and id, unchecked: for the service's stream operations, which check.
    fn stream_ids(
        &self,
        stream: &Resource<StreamHandle>,
    ) -> GpuResult<(gpu::SessionId, gpu::StreamId)> {
        let s = self.table.get(stream)?;
        Ok((s.session, s.id))
    }

    /// An event's id, refused unless it is of `session`.
    fn event_in(
        &self,
        session: gpu::SessionId,
        event: &Resource<EventHandle>,
    ) -> GpuResult<gpu::EventId> {
        let e = self.table.get(event)?;
        if e.session != session {
            return Err(crate::error::invalid(
                "the event is of another session; an event is usable only in the session that made it",
            )
            .into());
        }
        Ok(e.id)
    }

    fn queue_done(&mut self, session: gpu::SessionId, op: QueueOp) -> GpuResult<()> {
        match self.service.queue_op(session, op)? {
            QueueReply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

impl HostGpuStream for GpuState<'_> {
    fn launch(
        &mut self,
        this: Resource<StreamHandle>,
        kernel: Resource<KernelHandle>,
        config: LaunchConfig,
        args: Vec<KernelArg>,
    ) -> GpuResult<u64> {
        let (session, stream) = self.stream_ids(&this)?;
        let (module, index) = self.kernel_of(session, &kernel)?;
        let config = lift_config(&config);
        self.with_args(&args, relocations, lift_arg, |s, args| {
            Ok(s.service.stream_launch(
                session,
                stream,
                module,
                gpu::KernelRef::At(index),
                &config,
                args,
            )?)
        })
    }

    fn mem_write(
        &mut self,
        this: Resource<StreamHandle>,
        dst: Resource<BufferHandle>,
        offset: u64,
        data: Vec<u8>,
    ) -> GpuResult<()> {
        let (session, stream) = self.stream_ids(&this)?;
        let buffer = self.buffer_id(&dst)?;
        Ok(self
            .service
            .stream_write(session, stream, buffer, offset, &data)?)
    }

    fn mem_copy(
        &mut self,
        this: Resource<StreamHandle>,
        dst: Resource<BufferHandle>,
        dst_offset: u64,
        src: Resource<BufferHandle>,
        src_offset: u64,
        len: u64,
    ) -> GpuResult<()> {
        let session = self.stream_session(&this)?;
        let (dst, src) = (self.buffer_id(&dst)?, self.buffer_id(&src)?);
        Ok(self
            .service
            .mem_copy(session, (dst, dst_offset), (src, src_offset), len)?)
    }

    fn mem_read(
        &mut self,
        this: Resource<StreamHandle>,
        src: Resource<BufferHandle>,
        offset: u64,
        len: u64,
    ) -> GpuResult<Vec<u8>> {
        let (session, stream) = self.stream_ids(&this)?;
        let buffer = self.buffer_id(&src)?;
        Ok(self
            .service
            .stream_read(session, stream, buffer, offset, len)?)
    }

    fn record(
        &mut self,
        this: Resource<StreamHandle>,
        event: Resource<EventHandle>,
    ) -> GpuResult<()> {
        let s = self.table.get(&this)?;
        let (session, stream) = (s.session, s.id);
        let event = self.event_in(session, &event)?;
        self.queue_done(session, QueueOp::Record { event, stream })
    }

    fn wait(
        &mut self,
        this: Resource<StreamHandle>,
        event: Resource<EventHandle>,
    ) -> GpuResult<()> {
        let s = self.table.get(&this)?;
        let (session, stream) = (s.session, s.id);
        let event = self.event_in(session, &event)?;
        self.queue_done(session, QueueOp::Wait { stream, event })
    }

    fn synchronize(&mut self, this: Resource<StreamHandle>) -> GpuResult<()> {
        let s = self.table.get(&this)?;
        let (session, stream) = (s.session, s.id);
        self.queue_done(session, QueueOp::SyncStream(stream))
    }

    fn drop(&mut self, this: Resource<StreamHandle>) -> wasmtime::Result<()> {
        let s = self.table.delete(this)?;
        // A session already gone took its streams with it.
        let _ = self.service.queue_op(s.session, QueueOp::DropStream(s.id));
        Ok(())
    }
}

impl HostEvent for GpuState<'_> {
    fn query(&mut self, this: Resource<EventHandle>) -> GpuResult<bool> {
        let e = self.table.get(&this)?;
        let (session, id) = (e.session, e.id);
        match self.service.queue_op(session, QueueOp::Query(id))? {
            QueueReply::Ready(ready) => Ok(ready),
            other => Err(unexpected(other)),
        }
    }

    fn synchronize(&mut self, this: Resource<EventHandle>) -> GpuResult<()> {
        let e = self.table.get(&this)?;
        let (session, id) = (e.session, e.id);
        self.queue_done(session, QueueOp::SyncEvent(id))
    }

    fn elapsed_since(
        &mut self,
        this: Resource<EventHandle>,
        start: Resource<EventHandle>,
    ) -> GpuResult<u64> {
        let e = self.table.get(&this)?;
        let (session, end) = (e.session, e.id);
        let start = self.event_in(session, &start)?;
        match self
            .service
            .queue_op(session, QueueOp::Elapsed { start, end })?
        {
            QueueReply::Elapsed(d) => Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            other => Err(unexpected(other)),
        }
    }

    fn drop(&mut self, this: Resource<EventHandle>) -> wasmtime::Result<()> {
        let e = self.table.delete(this)?;
        let _ = self.service.queue_op(e.session, QueueOp::DropEvent(e.id));
        Ok(())
    }
}
