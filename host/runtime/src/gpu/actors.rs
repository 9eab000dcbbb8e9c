//! Persistent kernels ("actors") and the rings they exchange messages through (contract 0.2):
//! the operations on them as one request type, so a service that wraps another forwards them
//! all through one method ([`super::GpuService::actor_op`]).
//!
//! A ring is a single-producer, single-consumer queue of fixed-size messages in memory that the
//! host and the lease's kernels both see; an actor is a kernel launched to run as long as its
//! lease, exempt from the per-kernel deadline, steered through a control block in the same
//! memory. Byte layouts: `tasklet_worker::contract::actor`.

use super::types::{KernelArg, KernelRef, LaunchConfig, ModuleId};
use std::time::Duration;

/// How a ring's slots hold its messages: plain bytes, or each 4 bytes beside the message's
/// number (one bus round trip a message for a kernel reading host memory, instead of two).
pub use tasklet_worker::contract::actor::RingLayout;

/// A ring of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RingId(pub u64);

/// A persistent kernel of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub u64);

/// Which way a ring's messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingDirection {
    /// The tasklet sends, a kernel receives.
    ToDevice,
    /// A kernel sends, the tasklet receives.
    FromDevice,
}

/// Bytes of mapped memory (rings and control blocks) one lease may hold.
pub const MAX_LEASE_MAPPED_BYTES: usize = 16 << 20;
/// The most rings a session may hold at once.
pub const MAX_SESSION_RINGS: usize = 64;
/// The largest message a ring carries, in bytes.
pub const MAX_MESSAGE_BYTES: u32 = 64 << 10;
/// The longest one `recv` waits for its first message.
pub const MAX_RECV_WAIT: Duration = Duration::from_secs(10);
/// The longest grace period a `stop` may give a kernel.
pub const MAX_STOP_GRACE: Duration = Duration::from_secs(10);

/// One argument of a persistent launch.
#[derive(Debug, Clone, Copy)]
pub enum ActorArg<'a> {
    /// An argument as a launch takes it.
    Arg(KernelArg<'a>),
    /// The device address of one of the session's rings (its header; slots follow).
    Ring(RingId),
    /// The device address of the actor's own control block.
    Control,
}

/// An actor's control block, as read now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActorStatus {
    /// The kernel runs.
    pub is_active: bool,
    /// The host has asked it to return.
    pub should_terminate: bool,
    /// It has ended.
    pub has_terminated: bool,
    /// What the kernel counted as errors of its handler.
    pub errors_encountered: u32,
    /// What the kernel counted as messages handled.
    pub messages_processed: u64,
    /// Why it ended, when it failed (a fault, or its worker ended for it); `None` while it runs
    /// and once it returned.
    pub failure: Option<String>,
}

/// An operation on a session's rings and actors.
#[derive(Debug, Clone, Copy)]
pub enum ActorOp<'a> {
    /// A new ring of `capacity` messages (a power of two) of `message_size` bytes (a multiple
    /// of 4) each, its slots in `layout`.
    NewRing {
        direction: RingDirection,
        layout: RingLayout,
        message_size: u32,
        capacity: u32,
    },
    /// Puts as many of `messages` (whole messages, concatenated) as there is room for, on a
    /// to-device ring.
    Send {
        ring: RingId,
        messages: &'a [u8],
    },
    /// Takes up to `max` messages from a from-device ring, waiting up to `wait` for the first.
    Recv {
        ring: RingId,
        max: u32,
        wait: Duration,
    },
    DropRing(RingId),
    /// Starts a persistent kernel.
    Launch {
        module: ModuleId,
        kernel: KernelRef<'a>,
        config: &'a LaunchConfig,
        args: &'a [ActorArg<'a>],
    },
    /// Reads the actor's control block.
    Status(ActorId),
    /// Asks the actor to return and waits up to `grace` for it; past that its worker is ended,
    /// and with it the lease.
    Stop {
        actor: ActorId,
        grace: Duration,
    },
    DropActor(ActorId),
}

/// What an [`ActorOp`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActorReply {
    Done,
    Ring(RingId),
    /// Messages put.
    Sent(u32),
    /// Messages taken, concatenated.
    Messages(Vec<u8>),
    Actor(ActorId),
    Status(ActorStatus),
}
