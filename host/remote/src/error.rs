//! Why a client's request did not succeed, in one line each.

use tasklet_runtime::GpuError;
use tasklet_wire::{ErrorCode, ErrorReply, Opcode};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address could not be read or resolved.
    #[error("cannot reach node {addr}: {reason}")]
    Address { addr: String, reason: String },
    /// The certificate folder cannot be used.
    #[error(transparent)]
    Certs(#[from] tasklet_tls::Error),
    /// The client could not start its network machinery.
    #[error("cannot start the client: {0}")]
    Setup(String),
    /// Nothing answered at the address in time.
    #[error("no node answered at {addr} within {seconds}s (is `tasklet node` running there, and does UDP reach its port?)")]
    Unreachable { addr: String, seconds: u64 },
    /// The machine at the address refused UDP to its port at once: nothing listens there.
    #[error("nothing listens at {addr}: its machine refused the port (is `tasklet node` running there, and on that port?)")]
    PortClosed { addr: String },
    /// The TLS handshake was refused, by either side; the line says whose certificate and why.
    #[error("{0}")]
    Refused(String),
    /// The connection is gone; no request can be answered any more.
    #[error("disconnected: {0}")]
    Disconnected(String),
    /// The node answered the request with a failure.
    #[error("{opcode} failed: {error}")]
    Failed { opcode: Opcode, error: ErrorReply },
    /// The node sent something this client cannot read: it closed the connection.
    #[error("disconnected: the node broke the protocol ({0})")]
    Protocol(String),
    /// The deadline the client was given ([`crate::NodeClient::set_deadline`], a run's end)
    /// passed while it waited for the node: the connection was closed, with whatever it held.
    #[error("the deadline passed while waiting for the node; the connection was closed")]
    DeadlinePassed,
    /// A call that may go to any of several nodes had none to go to.
    #[error("no node to run it on: the list of nodes is empty")]
    NoNode,
    /// What a request would carry is larger than one message may be: refused before anything
    /// is sent.
    #[error(
        "{what} is {len} bytes, more than one message to a node carries ({limit} bytes){also}"
    )]
    TooLarge {
        what: &'static str,
        len: u64,
        limit: u64,
        /// What else bounds it, where something does (a node's own setting).
        also: &'static str,
    },
}

impl ClientError {
    /// The node's status, for a request it answered with a failure.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Failed { error, .. } => Some(error.code),
            _ => None,
        }
    }
}

impl From<ClientError> for GpuError {
    /// A remote failure as the local service would report it: the same case and message, with
    /// the pipelined op that failed named when a barrier reports it. Losing the node is losing
    /// the device.
    fn from(error: ClientError) -> GpuError {
        if let ClientError::DeadlinePassed = error {
            // The only deadline a GPU service is given is its run's end.
            return GpuError::DeadlineExceeded(
                "the tasklet reached its wall-time limit while waiting for the node's GPU; raise \
                 `wall-time` under [limits] if it needs longer (a policy's `max-wall-time` caps it)"
                    .into(),
            );
        }
        let ClientError::Failed { error, .. } = error else {
            return GpuError::DeviceLost(match error {
                ClientError::Disconnected(why) => format!("disconnected: {why}"),
                other => other.to_string(),
            });
        };
        // GPU_SUBMIT's failure names the step; its cause, when sent, is what a session's op
        // would have reported.
        let code = error.precise_code();
        let message = match error.failed_op {
            None => error.message,
            Some(op) => format!(
                "{} (reported for {}, request {})",
                error.message,
                op.opcode.name(),
                op.request_id
            ),
        };
        match code {
            ErrorCode::Unauthorized => GpuError::Unauthorized(message),
            ErrorCode::LoadFailed => GpuError::LoadFailed(message),
            ErrorCode::LaunchFailed => GpuError::LaunchFailed(message),
            ErrorCode::InvalidArgument | ErrorCode::NotFound => GpuError::InvalidArgument(message),
            ErrorCode::LeaseExpired => GpuError::LeaseExpired(message),
            ErrorCode::CapacityExceeded => GpuError::CapacityExceeded(message),
            ErrorCode::QuotaExceeded => GpuError::QuotaExceeded(message),
            ErrorCode::OutOfBounds => GpuError::OutOfBounds(message),
            ErrorCode::KernelFault => GpuError::KernelFault(message),
            ErrorCode::DeadlineExceeded => GpuError::DeadlineExceeded(message),
            ErrorCode::Unsupported => GpuError::Unsupported(message),
            // A node that takes no new leases: like one that is full, for now, here.
            ErrorCode::Draining => GpuError::CapacityExceeded(format!("draining: {message}")),
            ErrorCode::ReadFailed | ErrorCode::DeviceLost | ErrorCode::Internal => {
                GpuError::DeviceLost(message)
            }
            ErrorCode::ProtocolError => GpuError::DeviceLost(format!(
                "disconnected: the node says this client broke the protocol: {message}"
            )),
        }
    }
}
