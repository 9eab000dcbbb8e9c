//! Reply statuses and the body of a failed reply.

use crate::limits::MAX_ERROR_MESSAGE;
use crate::opcode::Opcode;
use crate::RequestId;

/// The status of a successful reply.
pub const STATUS_OK: u16 = 0;

/// Why a request failed: a reply's status other than [`STATUS_OK`]. Codes 1 and 5 are reserved
/// and never sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ErrorCode {
    /// The client's identity may not do this (e.g. the lease is another client's).
    Unauthorized = 2,
    /// A module did not parse, validate or compile.
    LoadFailed = 3,
    /// A launch was refused before it ran: bad kernel index, grid, block or arguments.
    LaunchFailed = 4,
    /// Reading results back from the device failed.
    ReadFailed = 6,
    /// A malformed argument: a zero size, an unknown handle, an argument of the wrong type.
    InvalidArgument = 7,
    /// The lease has ended (expired, released, or its worker was replaced).
    LeaseExpired = 8,
    /// The node cannot grant a lease that large now.
    CapacityExceeded = 9,
    /// The lease or the client's grant has no room for this.
    QuotaExceeded = 10,
    /// An offset or length falls outside the buffer or region it names.
    OutOfBounds = 11,
    /// A kernel faulted (illegal address, misaligned access, trap).
    KernelFault = 12,
    /// A kernel or operation ran past its deadline and was stopped.
    DeadlineExceeded = 13,
    /// The worker serving the lease died or stopped answering; the lease is gone.
    DeviceLost = 14,
    /// This node does not support the operation (or any protocol version the client offered).
    Unsupported = 15,
    /// No such lease, session, buffer, module or deployment.
    NotFound = 16,
    /// The peer broke the protocol; the connection is being closed.
    ProtocolError = 17,
    /// The node failed in a way that is not the client's doing.
    Internal = 18,
    /// The node is shutting down and takes no new work.
    Draining = 19,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::Unauthorized,
        ErrorCode::LoadFailed,
        ErrorCode::LaunchFailed,
        ErrorCode::ReadFailed,
        ErrorCode::InvalidArgument,
        ErrorCode::LeaseExpired,
        ErrorCode::CapacityExceeded,
        ErrorCode::QuotaExceeded,
        ErrorCode::OutOfBounds,
        ErrorCode::KernelFault,
        ErrorCode::DeadlineExceeded,
        ErrorCode::DeviceLost,
        ErrorCode::Unsupported,
        ErrorCode::NotFound,
        ErrorCode::ProtocolError,
        ErrorCode::Internal,
        ErrorCode::Draining,
    ];

    /// The code with this number; `None` for [`STATUS_OK`], the reserved codes and unknown ones.
    pub fn from_u16(code: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| *c as u16 == code)
    }

    /// The name docs/wire.md uses.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::LoadFailed => "LOAD_FAILED",
            ErrorCode::LaunchFailed => "LAUNCH_FAILED",
            ErrorCode::ReadFailed => "READ_FAILED",
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::LeaseExpired => "LEASE_EXPIRED",
            ErrorCode::CapacityExceeded => "CAPACITY_EXCEEDED",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::OutOfBounds => "OUT_OF_BOUNDS",
            ErrorCode::KernelFault => "KERNEL_FAULT",
            ErrorCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            ErrorCode::DeviceLost => "DEVICE_LOST",
            ErrorCode::Unsupported => "UNSUPPORTED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::Draining => "DRAINING",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u16)
    }
}

/// A pipelined op (LAUNCH or MEM_WRITE) named by a barrier's failed reply as the one that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailedOp {
    pub request_id: RequestId,
    pub opcode: Opcode,
}

/// The body of a failed reply, and of GOAWAY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: ErrorCode,
    /// For people: one line, UTF-8, at most [`MAX_ERROR_MESSAGE`] bytes on the wire.
    pub message: String,
    /// Only in the reply to a barrier (SYNC, MEM_READ): the earlier pipelined op of the session
    /// that failed, when it was one of those rather than the barrier itself.
    pub failed_op: Option<FailedOp>,
    /// Only in GPU_SUBMIT's failed reply: the precise status of what went wrong when the
    /// reply's own status is the step's (a kernel that faulted is `LAUNCH_FAILED` with cause
    /// `KERNEL_FAULT`), so that a client can tell them apart as a session would.
    pub cause: Option<ErrorCode>,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
        ErrorReply {
            code,
            message: message.into(),
            failed_op: None,
            cause: None,
        }
    }

    /// The precise status: the cause when one was sent, else the status itself.
    pub fn precise_code(&self) -> ErrorCode {
        self.cause.unwrap_or(self.code)
    }
}

impl std::fmt::Display for ErrorReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.name(), self.message)?;
        if let Some(op) = self.failed_op {
            write!(f, " (request {}, {})", op.request_id, op.opcode)?;
        }
        if let Some(cause) = self.cause {
            write!(f, " (cause {})", cause.name())?;
        }
        Ok(())
    }
}

impl std::error::Error for ErrorReply {}

/// `message` cut to at most [`MAX_ERROR_MESSAGE`] bytes, at a character boundary.
pub(crate) fn capped_message(message: &str) -> &str {
    if message.len() <= MAX_ERROR_MESSAGE {
        return message;
    }
    let mut end = MAX_ERROR_MESSAGE;
    // At most 3 steps back: a UTF-8 character is at most 4 bytes.
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_u16(code as u16), Some(code));
        }
        for reserved in [STATUS_OK, 1, 5, 20, 0xFFFF] {
            assert_eq!(ErrorCode::from_u16(reserved), None);
        }
        assert_eq!(ErrorCode::Unauthorized as u16, 2);
        assert_eq!(ErrorCode::LoadFailed as u16, 3);
        assert_eq!(ErrorCode::LaunchFailed as u16, 4);
        assert_eq!(ErrorCode::ReadFailed as u16, 6);
    }

    #[test]
    fn message_cut_at_a_char_boundary() {
        let short = "x".repeat(MAX_ERROR_MESSAGE);
        assert_eq!(capped_message(&short), short);
        // 'é' is 2 bytes: 1023 ASCII + 'é' straddles the cap.
        let straddling = format!("{}é", "x".repeat(MAX_ERROR_MESSAGE - 1));
        assert_eq!(capped_message(&straddling).len(), MAX_ERROR_MESSAGE - 1);
        let wide = "€".repeat(1000);
        let cut = capped_message(&wide);
        assert!(cut.len() <= MAX_ERROR_MESSAGE && cut.len() > MAX_ERROR_MESSAGE - 4);
        assert!(wide.starts_with(cut));
    }
}
