//! The incremental decoder: one per stream and direction, fed bytes as they arrive, in pieces of
//! any size, handing back messages and streamed data.
//!
//! It is a state machine of three states:
//!
//! - *header*: collecting a frame's 12 header bytes. With no streamed data due, the frame must be
//!   a message; while data is due, it must be the next data frame of that message.
//! - *body*: collecting a message's body (at most [`MAX_FRAME_BODY`] bytes, allocated as the bytes
//!   come, not when the length is read); when complete it is decoded, and if the message
//!   announces streamed data, that data is due from the next frame on. A body that arrives whole
//!   with its header is decoded where it lies, without this state.
//! - *chunk*: inside a data frame; its bytes are handed to the caller as they arrive, never
//!   buffered.
//!
//! Streamed data therefore follows its message at once, on the same stream, with no other frame
//! between its chunks. The first error ends decoding for good: every later call returns it again,
//! and the connection is to be closed.

use crate::error::DecodeError;
use crate::frame::{Direction, FrameHeader};
use crate::limits::{DEFAULT_MAX_STREAM_BYTES, FRAME_HEADER_LEN, MAX_FRAME_BODY};
use crate::message::{decode_goaway_body, Reply, Request};
use crate::opcode::Opcode;
use crate::status::ErrorReply;
use crate::RequestId;

/// What a receiver accepts beyond the protocol's fixed limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecoderConfig {
    /// The most streamed data one message may announce; a larger announcement is rejected at
    /// the message, before any of the data is read. The node tells clients its value in HELLO's
    /// reply.
    pub max_stream_bytes: u64,
}

impl Default for DecoderConfig {
    fn default() -> DecoderConfig {
        DecoderConfig {
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
        }
    }
}

/// Something decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A request (a node's decoder). If it announces streamed data, [`Event::Data`] follows.
    Request {
        request_id: RequestId,
        request: Request,
    },
    /// A reply (a client's decoder). If it announces streamed data, [`Event::Data`] follows.
    Reply { request_id: RequestId, reply: Reply },
    /// The node is closing the connection (a client's decoder).
    GoAway(ErrorReply),
    /// Streamed bytes of the message of `request_id`, in order, borrowed from the bytes fed;
    /// `remaining` more are due after these, and the data is complete when it is 0.
    Data {
        request_id: RequestId,
        opcode: Opcode,
        bytes: &'a [u8],
        remaining: u64,
    },
}

/// Streamed data announced and not yet all received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Due {
    request_id: RequestId,
    opcode: Opcode,
    remaining: u64,
}

#[derive(Debug)]
enum State {
    Header {
        bytes: [u8; FRAME_HEADER_LEN],
        filled: usize,
    },
    Body {
        header: FrameHeader,
        body: Vec<u8>,
    },
    /// Inside a data frame of `due`'s data, `left` bytes of it still to come.
    Chunk {
        due: Due,
        left: u32,
    },
}

const FRESH_HEADER: State = State::Header {
    bytes: [0; FRAME_HEADER_LEN],
    filled: 0,
};

/// Decodes the frames of one stream in one direction. See the module docs for its states.
#[derive(Debug)]
pub struct Decoder {
    direction: Direction,
    config: DecoderConfig,
    state: State,
    /// Between frames: the streamed data due from the next frame on.
    due: Option<Due>,
    failed: Option<DecodeError>,
}

impl Decoder {
    /// The node's decoder: reads requests and their data.
    pub fn for_node(config: DecoderConfig) -> Decoder {
        Decoder::new(Direction::ToNode, config)
    }

    /// A client's decoder: reads replies, GOAWAY, and reply data.
    pub fn for_client(config: DecoderConfig) -> Decoder {
        Decoder::new(Direction::ToClient, config)
    }

    pub fn new(direction: Direction, config: DecoderConfig) -> Decoder {
        Decoder {
            direction,
            config,
            state: FRESH_HEADER,
            due: None,
            failed: None,
        }
    }

    /// Decodes from the front of `input`: returns how many bytes were used and what, if anything,
    /// they completed. While `input` is not empty at least one byte is used, so a caller loops
    /// until it is:
    ///
    /// ```
    /// # use tasklet_wire::{Decoder, DecoderConfig, DecodeError, Event};
    /// # fn handle(_: Event) {}
    /// # fn feed(decoder: &mut Decoder, mut input: &[u8]) -> Result<(), DecodeError> {
    /// while !input.is_empty() {
    ///     let (used, event) = decoder.decode(input)?;
    ///     input = &input[used..];
    ///     if let Some(event) = event {
    ///         handle(event);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
    ) -> Result<(usize, Option<Event<'a>>), DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if input.is_empty() {
            return Ok((0, None));
        }
        let result = self.step(input);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// Whether the stream may end here: between frames, with no streamed data due. At the end of
    /// a stream call this; anything else means the peer stopped mid-frame or mid-data.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let place = match (&self.state, self.due) {
            (State::Header { filled: 0, .. }, None) => return Ok(()),
            (State::Header { filled: 0, .. }, Some(_)) => "with streamed data still due",
            (State::Header { .. }, _) => "inside a frame header",
            (State::Body { .. }, _) => "inside a frame body",
            (State::Chunk { .. }, _) => "inside a data frame",
        };
        Err(DecodeError::UnexpectedEnd { place })
    }

    /// Whether the decoder is in streamed data: between or inside the data frames of a message.
    /// The length of the frame body being gathered, if one is: the decoder holds its bytes
    /// until it is whole (at most [`MAX_FRAME_BODY`]), so a reader that bounds what a peer
    /// may make it hold counts this much from the frame's first bytes. Streamed data is never
    /// gathered (see [`Event::Data`]).
    pub fn body_pending(&self) -> Option<u32> {
        match &self.state {
            State::Body { header, .. } => Some(header.len),
            _ => None,
        }
    }

    pub fn in_data(&self) -> bool {
        self.due.is_some() || matches!(self.state, State::Chunk { .. })
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, Option<Event<'a>>), DecodeError> {
        match &mut self.state {
            State::Header { bytes, filled } => {
                let used = (FRAME_HEADER_LEN - *filled).min(input.len());
                bytes[*filled..*filled + used].copy_from_slice(&input[..used]);
                *filled += used;
                if *filled < FRAME_HEADER_LEN {
                    return Ok((used, None));
                }
                let header = FrameHeader::parse(bytes, self.direction)?;
                let event = self.start_frame(header)?;
                // A message whose whole body came with its header is decoded where it lies,
                // not gathered first.
                let rest = &input[used..];
                match &self.state {
                    State::Body { header, body }
                        if body.is_empty() && rest.len() >= header.len as usize =>
                    {
                        let header = *header;
                        self.state = FRESH_HEADER;
                        let event = self.finish_message(header, &rest[..header.len as usize])?;
                        Ok((used + header.len as usize, Some(event)))
                    }
                    _ => Ok((used, event)),
                }
            }
            State::Body { header, body } => {
                let wanted = header.len as usize - body.len();
                let used = wanted.min(input.len());
                reserve_within(body, used, header.len as usize);
                body.extend_from_slice(&input[..used]);
                if body.len() < header.len as usize {
                    return Ok((used, None));
                }
                let (header, body) = (*header, std::mem::take(body));
                self.state = FRESH_HEADER;
                let event = self.finish_message(header, &body)?;
                Ok((used, Some(event)))
            }
            State::Chunk { due, left } => {
                let used = (*left as usize).min(input.len());
                *left -= used as u32;
                due.remaining -= used as u64;
                let event = Event::Data {
                    request_id: due.request_id,
                    opcode: due.opcode,
                    bytes: &input[..used],
                    remaining: due.remaining,
                };
                if *left == 0 {
                    self.due = Some(*due).filter(|due| due.remaining > 0);
                    self.state = FRESH_HEADER;
                }
                Ok((used, Some(event)))
            }
        }
    }

    /// A complete, valid header: moves to the frame's body, and finishes an empty message at once.
    fn start_frame(&mut self, header: FrameHeader) -> Result<Option<Event<'static>>, DecodeError> {
        match (self.due, header.data) {
            (None, true) => Err(DecodeError::UnexpectedData {
                opcode: header.opcode,
                request_id: header.request_id,
            }),
            (Some(due), false) => Err(DecodeError::ExpectedData {
                opcode: header.opcode,
                remaining: due.remaining,
            }),
            (Some(due), true) => {
                if header.opcode != due.opcode || header.request_id != due.request_id {
                    return Err(DecodeError::MismatchedData {
                        opcode: header.opcode,
                        request_id: header.request_id,
                        open_opcode: due.opcode,
                        open_request_id: due.request_id,
                    });
                }
                if u64::from(header.len) > due.remaining {
                    return Err(DecodeError::ChunkOverrun {
                        len: header.len,
                        remaining: due.remaining,
                    });
                }
                self.due = None;
                self.state = State::Chunk {
                    due,
                    left: header.len,
                };
                Ok(None)
            }
            (None, false) => {
                // Checked by FrameHeader::parse; repeated because the allocation below relies on it.
                if header.len > MAX_FRAME_BODY {
                    return Err(DecodeError::FrameTooLong {
                        len: header.len,
                        limit: MAX_FRAME_BODY,
                    });
                }
                if header.len == 0 {
                    self.state = FRESH_HEADER;
                    return self.finish_message(header, &[]).map(Some);
                }
                self.state = State::Body {
                    header,
                    body: Vec::new(),
                };
                Ok(None)
            }
        }
    }

    fn finish_message(
        &mut self,
        header: FrameHeader,
        body: &[u8],
    ) -> Result<Event<'static>, DecodeError> {
        let request_id = header.request_id;
        let (event, streamed) = match self.direction {
            Direction::ToNode => {
                let request = Request::decode_body(header.opcode, body)?;
                let streamed = request.streamed();
                (
                    Event::Request {
                        request_id,
                        request,
                    },
                    streamed,
                )
            }
            Direction::ToClient if header.opcode == Opcode::GoAway => {
                if request_id != 0 {
                    return Err(DecodeError::InvalidValue {
                        field: "request id",
                        value: request_id.into(),
                    });
                }
                (Event::GoAway(decode_goaway_body(body)?), None)
            }
            Direction::ToClient => {
                let reply = Reply::decode_body(header.opcode, body)?;
                let streamed = reply.streamed();
                (Event::Reply { request_id, reply }, streamed)
            }
        };
        if let Some((field, len)) = streamed {
            if len > self.config.max_stream_bytes {
                return Err(DecodeError::StreamTooLong {
                    field,
                    len,
                    limit: self.config.max_stream_bytes,
                });
            }
            if len > 0 {
                self.due = Some(Due {
                    request_id,
                    opcode: header.opcode,
                    remaining: len,
                });
            }
        }
        Ok(event)
    }
}

/// Makes room for `more` bytes in `body` without reserving past `total`: a body grows with what
/// has arrived (doubling, for amortized copies) but never beyond the length its header declared.
fn reserve_within(body: &mut Vec<u8>, more: usize, total: usize) {
    let needed = body.len() + more;
    if needed <= body.capacity() {
        return;
    }
    let target = needed.max(body.capacity().saturating_mul(2)).min(total);
    body.reserve_exact(target - body.len());
}
