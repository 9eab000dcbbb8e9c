//! The messages: requests, replies, and the structures inside them.

mod device;
mod grant;
mod graph;
mod group;
mod kernel;
mod queue;
mod reply;
mod request;
mod requirements;

pub use device::Device;
pub use grant::{rights, Grant};
pub use graph::{Graph, GraphArg, GraphOp};
pub use group::{GroupLease, LeaseGroup};
pub use kernel::{Kernel, KernelArg, KernelParam, LoadedModule, Relocation, MAX_RELOCATIONS};
pub use queue::{Queue, QueueAnswer, QueueOp};
pub use reply::Reply;
pub use request::{GpuSubmit, Launch, LaunchBurst, Request};
pub use requirements::LeaseRequirements;

pub(crate) use reply::{decode_goaway_body, encode_goaway_body};
