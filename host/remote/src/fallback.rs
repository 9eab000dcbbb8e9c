//! Stateless calls that move to the next node when theirs is lost.
//!
//! A one-shot (GPU_SUBMIT on a lease of its own, or a tasklet's `GpuCall`) leaves nothing on
//! its node but its answer: when the node dies or the connection drops before that answer, or
//! the node refuses it before starting (it is full or draining), running it again elsewhere
//! gives the same answer. [`Fallback`] supplies the nodes to try next, in order;
//! [`submit_anywhere`] runs a GPU_SUBMIT on the first that answers, and
//! [`crate::RemoteGpu::with_fallback`] moves a tasklet's one-shots the same way.
//!
//! A session never moves: its buffers, modules and launches live on its node, so when that node
//! is lost every later operation of the session fails `disconnected`.

use crate::client::NodeClient;
use crate::connect::ConnectOptions;
use crate::error::ClientError;
use std::collections::VecDeque;
use tasklet_wire::{ErrorCode, GpuSubmit};

/// The nodes a stateless call may move to, in the order to try them.
pub trait Fallback: Send {
    /// A connection to the next node to try, `None` when none is left; a node that cannot be
    /// reached is `Some(Err(..))`, and the caller asks again. `why` says why the call is
    /// leaving the node it was on (for logs).
    fn next_node(&mut self, why: &str) -> Option<Result<NodeClient, ClientError>>;
}

/// A fixed list of nodes, tried in order, each once.
pub struct NodeList {
    nodes: VecDeque<ConnectOptions>,
}

impl NodeList {
    pub fn new(nodes: impl IntoIterator<Item = ConnectOptions>) -> NodeList {
        NodeList {
            nodes: nodes.into_iter().collect(),
        }
    }
}

impl Fallback for NodeList {
    fn next_node(&mut self, _why: &str) -> Option<Result<NodeClient, ClientError>> {
        let options = self.nodes.pop_front()?;
        Some(NodeClient::connect_with(&options))
    }
}

/// Whether a stateless call that failed with `err` may run on another node: nothing answered
/// it (the node could not be reached, its certificate was refused, the connection was lost
/// before the answer) or the node refused before starting it (full, draining). Any other
/// answer of the node is the call's answer.
pub fn stateless_may_move(err: &ClientError) -> bool {
    match err {
        ClientError::Unreachable { .. }
        | ClientError::PortClosed { .. }
        | ClientError::Refused(_)
        | ClientError::Address { .. }
        | ClientError::Disconnected(_) => true,
        ClientError::Failed { .. } => matches!(
            err.code(),
            Some(ErrorCode::CapacityExceeded | ErrorCode::Draining)
        ),
        _ => false,
    }
}

/// A GPU_SUBMIT's answer and the node that gave it.
#[derive(Debug)]
pub struct Submitted {
    pub output: Vec<u8>,
    /// The node's name, as its HELLO said.
    pub node: String,
}

/// Runs `submit` on a lease of its own ([`NodeClient::submit_once`]) on the first of `nodes`
/// that answers it: a node that cannot be reached, refuses for capacity or draining, or is lost
/// before it answers is left for the next. Any other failure is the answer. When every node was
/// left, the last reason is returned.
///
/// ```no_run
/// use tasklet_remote::{submit_anywhere, ConnectOptions, NodeList};
/// use tasklet_tls::Tenant;
/// use tasklet_wire::{GpuSubmit, LeaseId};
///
/// let dev = Tenant::new("dev")?;
/// let mut nodes = NodeList::new(
///     ["gpu1", "gpu2"].map(|addr| ConnectOptions::new(addr, "certs", dev.clone())),
/// );
/// let n: u32 = 1000;
/// let submit = GpuSubmit {
///     lease: LeaseId(0), // replaced by each node's lease
///     ptx: std::fs::read("kernels/iota.ptx")?,
///     kernel: "iota".into(),
///     grid: [n.div_ceil(256), 1, 1],
///     block: [256, 1, 1],
///     args: n.to_le_bytes().to_vec(),
///     output_size: 4 * u64::from(n),
///     output_offset: 0,
///     input: Vec::new(),
/// };
/// let done = submit_anywhere(&mut nodes, 4 * u64::from(n), 30, &submit)?;
/// println!("{} bytes from {}", done.output.len(), done.node);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn submit_anywhere(
    nodes: &mut dyn Fallback,
    min_bytes: u64,
    seconds: u32,
    submit: &GpuSubmit,
) -> Result<Submitted, ClientError> {
    let mut why = String::from("the first node");
    let mut last = None;
    while let Some(next) = nodes.next_node(&why) {
        let result = next.and_then(|mut client| {
            let output = client.submit_once(min_bytes, seconds, submit)?;
            Ok(Submitted {
                output,
                node: client.node_name().to_owned(),
            })
        });
        match result {
            Ok(done) => return Ok(done),
            Err(err) if stateless_may_move(&err) => {
                why = err.to_string();
                last = Some(err);
            }
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or(ClientError::NoNode))
}
