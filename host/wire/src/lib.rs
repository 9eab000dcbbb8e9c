//! The wire protocol of `tasklet node`, sans IO.
//!
//! A node serves leases, remote GPU sessions, one-shot GPU submissions, its inventory and deployed
//! tasklets to clients over a connection of ordered, reliable byte streams (QUIC with mutual TLS
//! in the node). This crate is only the protocol: it turns messages into bytes and bytes into
//! messages, and keeps the little state that takes. It opens no socket, reads no clock and spawns
//! nothing, so every rule of the protocol is tested here without a network; the node and its
//! clients wrap it in a thin async shell.
//!
//! The layers, each its own module, each using only those above it:
//!
//! - [`limits`], [`opcode`], [`status`], [`ids`], [`version`]: the protocol's numbers and names;
//! - [`frame`]: the 12-byte header in front of every frame;
//! - `codec`, [`message`]: message bodies ([`Request`], [`Reply`]);
//! - [`encode`]: frames out, and [`DataEncoder`] for the data a message streams;
//! - [`decoder`]: frames in, incrementally, from bytes cut anywhere ([`Decoder`]);
//! - [`tracker`]: the client's requests in flight ([`ClientTracker`]).
//!
//! docs/wire.md in the repository describes the protocol for implementers in other languages.
//!
//! ```
//! use tasklet_wire::*;
//!
//! // Client: a MEM_WRITE of 3 bytes, then a SYNC.
//! let mut tracker = ClientTracker::new(1024);
//! let mut out = Vec::new();
//! let write = Request::MemWrite { session: SessionId(1), buffer: BufferId(2), offset: 0, len: 3 };
//! let id = tracker.start(&write)?;
//! let mut data = encode_request(id, &write, &mut out)?.expect("3 bytes announced");
//! data.encode(b"abc", &mut out)?;
//! let sync = Request::Sync { session: SessionId(1) };
//! let sync_id = tracker.start(&sync)?;
//! encode_request(sync_id, &sync, &mut out)?;
//!
//! // Node: the same bytes, fed one at a time.
//! let mut node = Decoder::for_node(DecoderConfig::default());
//! let mut written = Vec::new();
//! let mut requests = Vec::new();
//! for byte in out.chunks(1) {
//!     match node.decode(byte)? {
//!         (_, Some(Event::Request { request_id, request })) => requests.push((request_id, request)),
//!         (_, Some(Event::Data { bytes, .. })) => written.extend_from_slice(bytes),
//!         _ => {}
//!     }
//! }
//! node.finish()?;
//! assert_eq!(requests, [(id, write), (sync_id, sync)]);
//! assert_eq!(written, b"abc");
//!
//! // The SYNC's OK reply settles the write.
//! let done = tracker.complete(sync_id, &Reply::Sync)?;
//! assert_eq!(done.settled.len(), 1);
//! assert_eq!(done.failed, None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod codec;
pub mod decoder;
pub mod encode;
pub mod error;
pub mod frame;
pub mod ids;
pub mod limits;
pub mod message;
pub mod opcode;
pub mod status;
pub mod tracker;
pub mod version;

pub use decoder::{Decoder, DecoderConfig, Event};
pub use encode::{encode_goaway, encode_reply, encode_request, DataEncoder};
pub use error::{DecodeError, EncodeError};
pub use frame::{Direction, FrameHeader};
pub use ids::{BufferId, Digest, LeaseId, ModuleId, RequestId, SessionId};
pub use message::{
    rights, Device, GpuSubmit, Grant, Graph, GraphArg, GraphOp, GroupLease, Kernel, KernelArg,
    KernelParam, Launch, LaunchBurst, LeaseGroup, LeaseRequirements, LoadedModule, Queue,
    QueueAnswer, QueueOp, Relocation, Reply, Request, MAX_RELOCATIONS,
};
pub use opcode::Opcode;
pub use status::{ErrorCode, ErrorReply, FailedOp, STATUS_OK};
pub use tracker::{ClientTracker, Completion, PostedOp, TrackError};
pub use version::{negotiate, PROTOCOL_VERSION};

/// The node's UDP port unless configured otherwise.
pub const DEFAULT_PORT: u16 = 5701;

/// The ALPN protocol name a QUIC shell negotiates in the TLS handshake, so that a peer speaking
/// something else is turned away before any frame.
pub const ALPN: &[u8] = b"tasklet/1";
