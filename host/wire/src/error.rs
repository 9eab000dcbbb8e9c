//! Why bytes did not decode, and why a message could not be encoded.
//!
//! Every [`DecodeError`] means the peer broke the protocol: the receiver answers GOAWAY with
//! `PROTOCOL_ERROR` (the node) or simply closes (a client), and the connection ends. The messages
//! are one line and name the field and, where there is one, the limit.

use crate::opcode::Opcode;

/// Bytes that are not a valid frame sequence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame version {version} is not supported (this end speaks {supported})")]
    UnsupportedVersion { version: u8, supported: u8 },
    #[error("frame flags 0x{flags:02X} set unknown bits (known: 0x{known:02X})")]
    UnknownFlags { flags: u8, known: u8 },
    #[error("opcode 0x{opcode:04X} is unknown")]
    UnknownOpcode { opcode: u16 },
    #[error("{opcode} is not sent as a {direction}")]
    WrongDirection {
        opcode: Opcode,
        direction: &'static str,
    },
    #[error("frame body of {len} bytes is over the limit of {limit}")]
    FrameTooLong { len: u32, limit: u32 },
    #[error("field {field} of {len} bytes is over the limit of {limit}")]
    FieldTooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("field {field} has {count} items, over the limit of {limit}")]
    TooManyItems {
        field: &'static str,
        count: u64,
        limit: u64,
    },
    #[error("frame body ends inside field {field}")]
    Truncated { field: &'static str },
    #[error("frame body has {count} bytes after its last field")]
    TrailingBytes { count: usize },
    #[error("field {field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("field {field} holds {value}, which is not allowed")]
    InvalidValue { field: &'static str, value: u64 },
    #[error("field digest is not {len} lowercase hex characters")]
    InvalidDigest { len: usize },
    #[error("status {status} is unknown")]
    UnknownStatus { status: u16 },
    #[error("data frame for {opcode}, request {request_id}, with no streamed data announced")]
    UnexpectedData { opcode: Opcode, request_id: u32 },
    #[error("{opcode} frame while {remaining} bytes of streamed data are still due")]
    ExpectedData { opcode: Opcode, remaining: u64 },
    #[error("data frame for {opcode}, request {request_id}, inside the data of {open_opcode}, request {open_request_id}")]
    MismatchedData {
        opcode: Opcode,
        request_id: u32,
        open_opcode: Opcode,
        open_request_id: u32,
    },
    #[error("data frame of {len} bytes: a chunk is 1 to {limit} bytes")]
    BadChunkLength { len: u32, limit: u32 },
    #[error("data frame of {len} bytes overruns the {remaining} bytes still due")]
    ChunkOverrun { len: u32, remaining: u64 },
    #[error("field {field} announces {len} bytes of streamed data, over this receiver's limit of {limit}")]
    StreamTooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("the stream ended {place}")]
    UnexpectedEnd { place: &'static str },
}

/// A message this end cannot put on the wire as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("field {field} of {len} bytes is over the limit of {limit}")]
    FieldTooLong {
        field: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("field {field} has {count} items, over the limit of {limit}")]
    TooManyItems {
        field: &'static str,
        count: u64,
        limit: u64,
    },
    #[error("frame body of {len} bytes is over the limit of {limit}")]
    FrameTooLong { len: usize, limit: u32 },
    #[error("{field}: {reason}")]
    InvalidValue {
        field: &'static str,
        reason: &'static str,
    },
    #[error("data chunk of {len} bytes: a chunk is 1 to {limit} bytes")]
    BadChunkLength { len: usize, limit: u32 },
    #[error("{len} more bytes of data than the {remaining} still announced")]
    DataOverrun { len: usize, remaining: u64 },
}
