//! What the host and a worker process agree on, and nothing else: each side depends on this
//! module, neither owns it, and a change here is a change to both (and, where it changes bytes
//! or memory layout, to [`channel::VERSION`]).
//!
//! - [`command_line`]: how a worker process is started ([`WorkerCommand`], [`WorkerArgs`], the
//!   [`BackendKind`] it serves) and what its exit status means;
//! - [`messages`]: the requests and responses, as plain data; among them [`launch`], the one
//!   description of a kernel launch that the host, the wire and the backends share, and
//!   [`launch_limits`], what a device lets one launch ask for, checked alike by both sides;
//! - [`codec`]: those messages as frames of bytes, decoded without trusting the sender;
//! - [`channel`]: the shared memory the frames travel through and both of its ends;
//! - [`control_socket`]: the socket beside the channel that carries file descriptors;
//! - [`error_kind`]: why an operation failed, as one byte on the wire;
//! - [`charging`]: the unit device memory is counted in, by the worker and the host alike;
//! - [`modules`]: which loaded modules a worker shares, and how many ids it holds;
//! - [`marks`]: the points in a worker's queue the host records and asks about (stream events);
//! - [`quote`]: how much of a tenant's names and text an error message may repeat;
//! - [`actor`]: the control blocks and rings a persistent kernel shares with the host.

pub mod actor;
pub mod channel;
pub mod charging;
pub mod codec;
pub mod command_line;
pub mod control_socket;
pub mod error_kind;
pub mod launch;
pub mod launch_limits;
pub mod marks;
pub mod messages;
pub mod modules;
pub mod quote;

pub use charging::{charged_bytes, ALLOC_GRANULE};
pub use command_line::{BackendKind, DeviceBinding, WorkerArgs, WorkerCommand, EXIT_DEADLINE};
pub use error_kind::ErrorKind;
pub use launch::Launch;
pub use launch_limits::{LaunchLimits, LimitExceeded};
pub use messages::{Compiled, KernelTable, LoadedModule, Request, Response, WorkerInfo};
