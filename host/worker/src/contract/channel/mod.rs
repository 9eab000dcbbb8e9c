//! The channel between a host and one worker: a memfd mapped `MAP_SHARED` by both processes,
//! through which request frames go one way and responses the other.
//!
//! - [`layout`]: the region and where everything lies in it ([`SharedRegion`]);
//! - [`ring`]: the request ring's records (header, stamp, padding, wrap);
//! - `wake`: how a waiting side spins, then sleeps on a futex without losing a wake-up;
//! - `life`: the life lock, which tells the host the worker's serving thread has ended without
//!   a system call;
//! - [`host_end`]: the host's end ([`HostEnd`]): posts and calls, waits for answers;
//! - [`worker_end`]: the worker's end ([`WorkerEnd`]): takes records, answers calls.
//!
//! Both ends live here, beside the layout they share, because their hand-off — who writes which
//! word, in what order, and who may sleep when — is one protocol that has to be read and changed
//! as a whole; each side of the crate uses only its own end.
//!
//! Requests go through a ring of frames so that the host can queue many *posted* frames (kernel
//! launches, which get no response) while the worker is still working through earlier ones. A
//! *call* (every request but a launch) gets exactly one response, in the single response slot,
//! tagged with the call's seq; only one call is outstanding at a time. A call frame too large for
//! the ring goes to the data region (only calls are ever that large: module text).
//!
//! A `sync` may also be answered by the *completion word*, on a cache line of its own in the header
//! page: a worker whose device can store into host memory in stream order (cuda:
//! `cuStreamWriteValue32` into the page-locked header page) asks it to store the sync's seq there
//! once every kernel before it has finished, and the host, spinning for the response, takes that
//! store as the `Ok` (one hand-off fewer on the hottest path, launch + sync). The worker still
//! answers the call as usual, later; the host then skips that answer while waiting for the next
//! one, so responses may lag behind the calls sent by one signalled sync (see
//! [`HostEnd::wait`]). A sync that fails stores nothing: its error arrives as a response. The word
//! is as untrusted as every response: a worker or a kernel of its own lease that stores a seq early
//! only misleads its own tenant.
//!
//! Every response also carries the GPU time the worker has measured since it started (nanoseconds,
//! only growing; cuda: device events around each launch group, emu: the time spent executing
//! launches), in a word on the response's own cache line: the host reads it with the answer at no
//! cost of its own and charges the difference to the lease that holds the worker. A call the
//! completion word answered carries none; the next response does.
//!
//! Each waiting side spins for a short, adaptive while and then sleeps on a futex (`wake`).
//! There are three such waits: the worker waiting for `head`, the host waiting for ring space
//! (`tail`), and the host waiting for a response.
//!
//! The worker is untrusted: the host never reads the ring back, copies a response frame out of the
//! mapping before decoding it, bounds-checks every location, length and counter the worker wrote,
//! and never waits without a deadline and a liveness check. The memfd is sealed against resizing
//! so a worker cannot truncate it under the host (which would turn host reads into SIGBUS).

pub mod host_end;
pub mod layout;
mod life;
pub mod ring;
mod wake;
pub mod worker_end;

pub use host_end::{Answer, HostEnd, SendError, WaitError};
pub use layout::{SharedRegion, TransportError, DEFAULT_DATA_SIZE, MSG_AREA, RING, VERSION};
pub use ring::record_size;
pub use worker_end::{Incoming, WorkerEnd};

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
