//! Writing frames: a message is encoded whole; the data it announces is then written through the
//! [`DataEncoder`] that encoding it returned, in chunks, as the caller has it.

use crate::codec::Writer;
use crate::error::EncodeError;
use crate::frame::{Direction, FrameHeader};
use crate::limits::{FRAME_HEADER_LEN, MAX_CHUNK, MAX_FRAME_BODY};
use crate::message::{encode_goaway_body, Reply, Request};
use crate::opcode::Opcode;
use crate::status::ErrorReply;
use crate::RequestId;

/// Appends the frame of `request` to `out`. When the request announces streamed data (a
/// MEM_WRITE, DEPLOY_PUSH or DEPLOY_RUN of more than 0 bytes), returns the encoder for that data,
/// which must follow on the same stream before any other frame. On error `out` is left as it was.
pub fn encode_request(
    request_id: RequestId,
    request: &Request,
    out: &mut Vec<u8>,
) -> Result<Option<DataEncoder>, EncodeError> {
    let opcode = request.opcode();
    encode_message(Direction::ToNode, opcode, request_id, out, |w| {
        request.encode_body(w)
    })?;
    Ok(DataEncoder::announced(
        Direction::ToNode,
        opcode,
        request_id,
        request.streamed(),
    ))
}

/// Appends the frame of `reply` to request `request_id` to `out`; as [`encode_request`] for the
/// streamed data of a MEM_READ, GPU_SUBMIT or DEPLOY_RUN reply.
pub fn encode_reply(
    request_id: RequestId,
    reply: &Reply,
    out: &mut Vec<u8>,
) -> Result<Option<DataEncoder>, EncodeError> {
    let opcode = reply.opcode();
    encode_message(Direction::ToClient, opcode, request_id, out, |w| {
        reply.encode_body(w)
    })?;
    Ok(DataEncoder::announced(
        Direction::ToClient,
        opcode,
        request_id,
        reply.streamed(),
    ))
}

/// Appends a GOAWAY frame (request id 0): the node is closing the connection because of `error`.
pub fn encode_goaway(error: &ErrorReply, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    encode_message(Direction::ToClient, Opcode::GoAway, 0, out, |w| {
        encode_goaway_body(error, w)
    })
}

fn encode_message(
    direction: Direction,
    opcode: Opcode,
    request_id: RequestId,
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Writer) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    let written = body(&mut Writer::new(out)).and_then(|()| {
        let len = out.len() - start - FRAME_HEADER_LEN;
        u32::try_from(len)
            .ok()
            .filter(|len| *len <= MAX_FRAME_BODY)
            .ok_or(EncodeError::FrameTooLong {
                len,
                limit: MAX_FRAME_BODY,
            })
    });
    match written {
        Ok(len) => {
            let header = FrameHeader {
                direction,
                data: false,
                opcode,
                request_id,
                len,
            };
            out[start..start + FRAME_HEADER_LEN].copy_from_slice(&header.to_bytes());
            Ok(())
        }
        Err(err) => {
            out.truncate(start);
            Err(err)
        }
    }
}

/// Writes the data a message announced, as data frames of 1 to [`MAX_CHUNK`] bytes, and refuses
/// to write more than was announced. The data may be cut into chunks anywhere: the receiver sees
/// the same bytes whatever the cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the announced data must follow the message"]
pub struct DataEncoder {
    direction: Direction,
    opcode: Opcode,
    request_id: RequestId,
    remaining: u64,
}

impl DataEncoder {
    fn announced(
        direction: Direction,
        opcode: Opcode,
        request_id: RequestId,
        streamed: Option<(&'static str, u64)>,
    ) -> Option<DataEncoder> {
        match streamed {
            Some((_, len)) if len > 0 => Some(DataEncoder {
                direction,
                opcode,
                request_id,
                remaining: len,
            }),
            _ => None,
        }
    }

    /// Bytes still to be written.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    pub fn is_done(&self) -> bool {
        self.remaining == 0
    }

    /// The header of the next data frame, which carries `len` bytes (1 to [`MAX_CHUNK`], at most
    /// [`DataEncoder::remaining`]); the caller writes those bytes after it. For writing a large
    /// buffer without copying it into a frame.
    pub fn chunk_header(&mut self, len: usize) -> Result<[u8; FRAME_HEADER_LEN], EncodeError> {
        if len == 0 || len > MAX_CHUNK as usize {
            return Err(EncodeError::BadChunkLength {
                len,
                limit: MAX_CHUNK,
            });
        }
        if len as u64 > self.remaining {
            return Err(EncodeError::DataOverrun {
                len,
                remaining: self.remaining,
            });
        }
        self.remaining -= len as u64;
        let header = FrameHeader {
            direction: self.direction,
            data: true,
            opcode: self.opcode,
            request_id: self.request_id,
            // len <= MAX_CHUNK, a u32.
            len: len as u32,
        };
        Ok(header.to_bytes())
    }

    /// Appends `data` to `out` as data frames of at most [`MAX_CHUNK`] bytes each.
    pub fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if data.len() as u64 > self.remaining {
            return Err(EncodeError::DataOverrun {
                len: data.len(),
                remaining: self.remaining,
            });
        }
        for chunk in data.chunks(MAX_CHUNK as usize) {
            let header = self.chunk_header(chunk.len())?;
            out.extend_from_slice(&header);
            out.extend_from_slice(chunk);
        }
        Ok(())
    }
}
