//! Replies that stream what they read from the device (MEM_READ, GPU_SUBMIT): the device is read
//! in pieces, each sent as it is read, so a large read needs neither the whole of it in memory
//! nor its whole time before the first byte leaves.

use super::Dispatcher;
use crate::job::ReplyTo;
use crate::reply::{abort, send_piece, start_reply, Failure};
use tasklet_runtime::gpu::{self, GpuService};
use tasklet_wire::{DataEncoder, ErrorCode, Reply, RequestId};

/// Bytes read from the device at once.
pub(super) const READ_PIECE: u64 = 8 << 20;

impl Dispatcher {
    /// MEM_READ: the whole span is checked, and the first piece read, before the OK reply is
    /// sent; a failure after that (the worker lost mid-read) can only close the connection.
    pub(super) fn stream_read(
        &mut self,
        to: &ReplyTo,
        request_id: RequestId,
        session: gpu::SessionId,
        buffer: gpu::BufferId,
        offset: u64,
        len: u64,
    ) -> Result<(), Failure> {
        let first_len = len.min(READ_PIECE);
        if len > first_len {
            // The same refusal the host gives a read too large for the reader's memory, for the
            // read as a whole rather than for a piece of it.
            let limit = self.grant.limits.memory;
            if len > limit {
                return Err(Failure::new(
                    ErrorCode::OutOfBounds,
                    format!("a read of {len} bytes cannot fit in the tasklet's {limit}-byte memory limit; read in pieces"),
                ));
            }
            let end = offset.checked_add(len).ok_or_else(|| {
                Failure::new(
                    ErrorCode::OutOfBounds,
                    format!(
                        "bytes {offset}..{} are outside the buffer",
                        offset as u128 + len as u128
                    ),
                )
            })?;
            self.gpu().mem_read(session, buffer, end, 0)?;
        }
        let first = self.gpu().mem_read(session, buffer, offset, first_len)?;
        let Some(mut data) = start_reply(to, request_id, &Reply::MemRead { len }) else {
            return Ok(());
        };
        send_piece(to, &mut data, first);
        self.stream_rest(to, &mut data, session, buffer, offset, first_len, len);
        Ok(())
    }

    /// Sends the rest of a streamed read whose first `sent` bytes are on their way, piece by
    /// piece. A failure now can only abort the stream (the OK reply has begun). Returns the bytes
    /// sent in all.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stream_rest(
        &mut self,
        to: &ReplyTo,
        data: &mut DataEncoder,
        session: gpu::SessionId,
        buffer: gpu::BufferId,
        offset: u64,
        sent: u64,
        len: u64,
    ) -> u64 {
        let mut at = sent;
        while at < len {
            let piece = (len - at).min(READ_PIECE);
            match self.gpu().mem_read(session, buffer, offset + at, piece) {
                Ok(bytes) => send_piece(to, data, bytes),
                Err(err) => {
                    abort(to, &err.to_string());
                    return at;
                }
            }
            at += piece;
        }
        len
    }
}
