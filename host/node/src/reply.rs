//! Answers on a stream: a reply message, a reply whose data follows in pieces, a failure, or the
//! end of the connection. Whoever serves a request (the connection's GPU thread, a deployment's
//! blocking thread) sends through these to the stream's outlet (`outlet`), which puts them on
//! the wire in the order they were sent.
//!
//! Every function here may block while the stream's writer has a full queue, so they are called
//! from OS threads of the node's own, never from an async task.

use crate::job::ReplyTo;
use bytes::Bytes;
use tasklet_wire::limits::MAX_CHUNK;
use tasklet_wire::{encode_reply, DataEncoder, ErrorCode, ErrorReply, Opcode, Reply, RequestId};

/// A failed request, as its reply will say.
#[derive(Debug)]
pub(crate) struct Failure(pub ErrorReply);

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure(ErrorReply::new(code, message))
    }
}

/// Sends a reply message. A reply that cannot be encoded (a module whose kernel list passes the
/// protocol's limits) is answered with the reason instead.
pub(crate) fn send(to: &ReplyTo, request_id: RequestId, reply: &Reply) {
    let mut out = Vec::new();
    if let Err(err) = encode_reply(request_id, reply, &mut out) {
        let opcode = reply.opcode();
        let code = match opcode {
            Opcode::ModuleLoad | Opcode::ModuleLoadSource => ErrorCode::LoadFailed,
            _ => ErrorCode::Internal,
        };
        let error = ErrorReply::new(
            code,
            format!("the node cannot put its reply on the wire: {err}"),
        );
        out.clear();
        if encode_reply(request_id, &Reply::Error { opcode, error }, &mut out).is_err() {
            return;
        }
    }
    to.put(out.into());
}

/// Sends the failure of a request of `opcode`.
pub(crate) fn fail(to: &ReplyTo, request_id: RequestId, opcode: Opcode, failure: Failure) {
    send(
        to,
        request_id,
        &Reply::Error {
            opcode,
            error: failure.0,
        },
    );
}

/// Ends the connection: GOAWAY with `error`, then a close.
pub(crate) fn close(to: &ReplyTo, error: ErrorReply) {
    to.close(error);
}

/// Sends an OK reply that announces data; returns the encoder for that data (`None` when there
/// is none to send, or the reply could not be sent).
pub(crate) fn start_reply(
    to: &ReplyTo,
    request_id: RequestId,
    reply: &Reply,
) -> Option<DataEncoder> {
    let mut out = Vec::new();
    match encode_reply(request_id, reply, &mut out) {
        Ok(data) => {
            to.put(out.into());
            data
        }
        Err(err) => {
            let error = ErrorReply::new(
                ErrorCode::Internal,
                format!("the node cannot put its reply on the wire: {err}"),
            );
            send(
                to,
                request_id,
                &Reply::Error {
                    opcode: reply.opcode(),
                    error,
                },
            );
            None
        }
    }
}

/// Sends `bytes` as data frames, without copying them: each frame is a header and a slice.
pub(crate) fn send_piece(to: &ReplyTo, data: &mut DataEncoder, bytes: impl Into<Bytes>) {
    let bytes = bytes.into();
    let mut at = 0;
    while at < bytes.len() {
        let len = (bytes.len() - at).min(MAX_CHUNK as usize);
        // The pieces add up to what the reply announced, in chunks within the limit.
        let Ok(header) = data.chunk_header(len) else {
            return;
        };
        to.put(Bytes::copy_from_slice(&header));
        to.put(bytes.slice(at..at + len));
        at += len;
    }
}

/// A streamed reply that cannot be finished: the connection is closed, saying why.
pub(crate) fn abort(to: &ReplyTo, why: &str) {
    let error = ErrorReply::new(
        ErrorCode::Internal,
        format!("a read failed after its reply had begun, so the connection is closed: {why}"),
    );
    to.close(error);
}
