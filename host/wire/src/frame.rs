//! The frame header: the fixed 12 bytes in front of every message and every data chunk.
//!
//! ```text
//! offset  size  field
//! 0       1     version     PROTOCOL_VERSION (HELLO's frames: HELLO_VERSION); any other value
//!                           is rejected
//! 1       1     flags       bit 0 REPLY (node → client), bit 1 DATA (a chunk of streamed data);
//!                           the other bits must be 0
//! 2       2     opcode      what the frame is about (a data chunk: the op whose data it carries)
//! 4       4     request id  chosen by the client; echoed by the reply and by data frames
//! 8       4     length      bytes of body that follow
//! ```
//!
//! Integers are big-endian. A message's body is at most [`MAX_FRAME_BODY`] bytes; a data frame's
//! is 1 to [`MAX_CHUNK`] bytes. All of this is checked here, before the body is waited for.

use crate::error::DecodeError;
use crate::limits::{FRAME_HEADER_LEN, MAX_CHUNK, MAX_FRAME_BODY};
use crate::opcode::Opcode;
use crate::version::{frame_version, HELLO_VERSION, PROTOCOL_VERSION};
use crate::RequestId;

const FLAG_REPLY: u8 = 0x01;
const FLAG_DATA: u8 = 0x02;
const KNOWN_FLAGS: u8 = FLAG_REPLY | FLAG_DATA;

/// Which way a frame travels. Every frame says so (the REPLY flag), so a frame sent the wrong way
/// is caught at its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client → node: requests and the data that follows them.
    ToNode,
    /// Node → client: replies, GOAWAY, and the data that follows replies.
    ToClient,
}

impl Direction {
    fn message_kind(self) -> &'static str {
        match self {
            Direction::ToNode => "request",
            Direction::ToClient => "reply",
        }
    }
}

/// A decoded (or to-be-encoded) frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub direction: Direction,
    /// A chunk of streamed data rather than a message.
    pub data: bool,
    pub opcode: Opcode,
    pub request_id: RequestId,
    /// Bytes of body that follow the header.
    pub len: u32,
}

impl FrameHeader {
    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut flags = 0;
        if self.direction == Direction::ToClient {
            flags |= FLAG_REPLY;
        }
        if self.data {
            flags |= FLAG_DATA;
        }
        let mut bytes = [0u8; FRAME_HEADER_LEN];
        bytes[0] = frame_version(self.opcode);
        bytes[1] = flags;
        bytes[2..4].copy_from_slice(&(self.opcode as u16).to_be_bytes());
        bytes[4..8].copy_from_slice(&self.request_id.to_be_bytes());
        bytes[8..12].copy_from_slice(&self.len.to_be_bytes());
        bytes
    }

    /// Parses a header that must travel in `expected` direction, checking in order: version,
    /// flags, opcode, direction, length.
    pub fn parse(
        bytes: &[u8; FRAME_HEADER_LEN],
        expected: Direction,
    ) -> Result<FrameHeader, DecodeError> {
        // A version byte that no frame of this crate's carries is refused before anything else;
        // which of the two an opcode's frame carries is checked once the opcode is known.
        let version = bytes[0];
        if version != PROTOCOL_VERSION && version != HELLO_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                version,
                supported: PROTOCOL_VERSION,
            });
        }
        let flags = bytes[1];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(DecodeError::UnknownFlags {
                flags,
                known: KNOWN_FLAGS,
            });
        }
        let code = u16::from_be_bytes([bytes[2], bytes[3]]);
        let opcode = Opcode::from_u16(code).ok_or(DecodeError::UnknownOpcode { opcode: code })?;
        if version != frame_version(opcode) {
            return Err(DecodeError::UnsupportedVersion {
                version,
                supported: frame_version(opcode),
            });
        }
        let direction = if flags & FLAG_REPLY != 0 {
            Direction::ToClient
        } else {
            Direction::ToNode
        };
        if direction != expected {
            return Err(DecodeError::WrongDirection {
                opcode,
                direction: direction.message_kind(),
            });
        }
        let header = FrameHeader {
            direction,
            data: flags & FLAG_DATA != 0,
            opcode,
            request_id: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            len: u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
        };
        header.check()?;
        Ok(header)
    }

    /// The rules a header obeys whatever its bytes: the opcode travels this way, and the length
    /// is within its limit.
    fn check(&self) -> Result<(), DecodeError> {
        let allowed = match self.direction {
            Direction::ToNode => self.opcode.is_request(),
            // GOAWAY is a message to the client but answers nothing; pipelined ops get no reply.
            Direction::ToClient => {
                self.opcode.has_reply() || (self.opcode == Opcode::GoAway && !self.data)
            }
        };
        if !allowed {
            return Err(DecodeError::WrongDirection {
                opcode: self.opcode,
                direction: self.direction.message_kind(),
            });
        }
        if self.data {
            if self.len == 0 || self.len > MAX_CHUNK {
                return Err(DecodeError::BadChunkLength {
                    len: self.len,
                    limit: MAX_CHUNK,
                });
            }
        } else if self.len > MAX_FRAME_BODY {
            return Err(DecodeError::FrameTooLong {
                len: self.len,
                limit: MAX_FRAME_BODY,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(direction: Direction, opcode: Opcode, len: u32) -> FrameHeader {
        FrameHeader {
            direction,
            data: false,
            opcode,
            request_id: 0x0102_0304,
            len,
        }
    }

    #[test]
    fn layout() {
        let h = FrameHeader {
            data: true,
            ..header(Direction::ToClient, Opcode::MemRead, 5)
        };
        assert_eq!(h.to_bytes(), [10, 0x03, 0x06, 0x06, 1, 2, 3, 4, 0, 0, 0, 5]);
        assert_eq!(
            FrameHeader::parse(&h.to_bytes(), Direction::ToClient),
            Ok(h)
        );
    }

    #[test]
    fn rejections_in_order() {
        let good = header(Direction::ToNode, Opcode::Sync, 8).to_bytes();
        for version in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11] {
            let mut bad = good;
            bad[0] = version;
            assert_eq!(
                FrameHeader::parse(&bad, Direction::ToNode),
                Err(DecodeError::UnsupportedVersion {
                    version,
                    supported: 10
                })
            );
        }
        let mut bad = good;
        bad[1] = 0x04;
        assert_eq!(
            FrameHeader::parse(&bad, Direction::ToNode),
            Err(DecodeError::UnknownFlags { flags: 4, known: 3 })
        );
        let mut bad = good;
        bad[2..4].copy_from_slice(&0x0699u16.to_be_bytes());
        assert_eq!(
            FrameHeader::parse(&bad, Direction::ToNode),
            Err(DecodeError::UnknownOpcode { opcode: 0x0699 })
        );
        assert_eq!(
            FrameHeader::parse(&good, Direction::ToClient),
            Err(DecodeError::WrongDirection {
                opcode: Opcode::Sync,
                direction: "request"
            })
        );
        let mut bad = good;
        bad[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            FrameHeader::parse(&bad, Direction::ToNode),
            Err(DecodeError::FrameTooLong {
                len: u32::MAX,
                limit: MAX_FRAME_BODY
            })
        );
    }

    #[test]
    fn hello_is_framed_as_version_1_and_nothing_else_is() {
        let hello = header(Direction::ToNode, Opcode::Hello, 4);
        let bytes = hello.to_bytes();
        assert_eq!(bytes[0], 1);
        assert_eq!(FrameHeader::parse(&bytes, Direction::ToNode), Ok(hello));
        let mut bad = bytes;
        bad[0] = PROTOCOL_VERSION;
        assert_eq!(
            FrameHeader::parse(&bad, Direction::ToNode),
            Err(DecodeError::UnsupportedVersion {
                version: PROTOCOL_VERSION,
                supported: 1
            })
        );
    }

    #[test]
    fn direction_rules() {
        let launch_reply = header(Direction::ToClient, Opcode::Launch, 2).to_bytes();
        assert_eq!(
            FrameHeader::parse(&launch_reply, Direction::ToClient),
            Err(DecodeError::WrongDirection {
                opcode: Opcode::Launch,
                direction: "reply"
            })
        );
        let goaway_request = header(Direction::ToNode, Opcode::GoAway, 2).to_bytes();
        assert_eq!(
            FrameHeader::parse(&goaway_request, Direction::ToNode),
            Err(DecodeError::WrongDirection {
                opcode: Opcode::GoAway,
                direction: "request"
            })
        );
        let goaway = header(Direction::ToClient, Opcode::GoAway, 2);
        assert_eq!(
            FrameHeader::parse(&goaway.to_bytes(), Direction::ToClient),
            Ok(goaway)
        );
        // Data frames go with requests to the node too (MEM_WRITE's data).
        let write_data = FrameHeader {
            data: true,
            ..header(Direction::ToNode, Opcode::MemWrite, 1)
        };
        assert_eq!(
            FrameHeader::parse(&write_data.to_bytes(), Direction::ToNode),
            Ok(write_data)
        );
    }

    #[test]
    fn chunk_lengths() {
        for len in [0, MAX_CHUNK + 1, u32::MAX] {
            let h = FrameHeader {
                data: true,
                ..header(Direction::ToNode, Opcode::MemWrite, len)
            };
            assert_eq!(
                FrameHeader::parse(&h.to_bytes(), Direction::ToNode),
                Err(DecodeError::BadChunkLength {
                    len,
                    limit: MAX_CHUNK
                })
            );
        }
        let h = FrameHeader {
            data: true,
            ..header(Direction::ToNode, Opcode::MemWrite, MAX_CHUNK)
        };
        assert_eq!(FrameHeader::parse(&h.to_bytes(), Direction::ToNode), Ok(h));
    }
}
