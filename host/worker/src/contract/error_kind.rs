//! Why an operation failed, as both sides name it: the one byte an error travels as.

use std::fmt;

/// Why the backend refused or failed an operation. Travels over the wire as one byte
/// (see [`ErrorKind::to_wire`]), so the numbering is part of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The device (or the worker's configured cap) has no room for the allocation.
    OutOfMemory,
    /// An address range that no allocation covers.
    OutOfBounds,
    /// Malformed or meaningless arguments: an unknown module id or kernel index, freeing a
    /// non-allocation, zero sizes…
    InvalidArgument,
    /// The module did not parse/compile; the message names the line.
    LoadFailed,
    /// The launch was refused before running (bad dimensions, wrong argument block, too many
    /// resources).
    LaunchFailed,
    /// The kernel faulted. The worker is poisoned: on a GPU the context is unusable afterwards.
    KernelFault,
    /// The kernel ran past its deadline. The worker is poisoned (or already killed).
    DeadlineExceeded,
    /// The backend cannot do this at all (e.g. CUDA C source on the emulator).
    Unsupported,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        ErrorKind::OutOfMemory,
        ErrorKind::OutOfBounds,
        ErrorKind::InvalidArgument,
        ErrorKind::LoadFailed,
        ErrorKind::LaunchFailed,
        ErrorKind::KernelFault,
        ErrorKind::DeadlineExceeded,
        ErrorKind::Unsupported,
    ];

    pub fn to_wire(self) -> u8 {
        match self {
            ErrorKind::OutOfMemory => 1,
            ErrorKind::OutOfBounds => 2,
            ErrorKind::InvalidArgument => 3,
            ErrorKind::LoadFailed => 4,
            ErrorKind::LaunchFailed => 5,
            ErrorKind::KernelFault => 6,
            ErrorKind::DeadlineExceeded => 7,
            ErrorKind::Unsupported => 8,
        }
    }

    pub fn from_wire(b: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.to_wire() == b)
    }

    /// Kinds after which the worker must never serve another op or lease: on a GPU, a fault
    /// poisons the whole context and a runaway kernel can only be stopped by killing the process.
    pub fn poisons_worker(self) -> bool {
        matches!(self, ErrorKind::KernelFault | ErrorKind::DeadlineExceeded)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::OutOfMemory => "out-of-memory",
            ErrorKind::OutOfBounds => "out-of-bounds",
            ErrorKind::InvalidArgument => "invalid-argument",
            ErrorKind::LoadFailed => "load-failed",
            ErrorKind::LaunchFailed => "launch-failed",
            ErrorKind::KernelFault => "kernel-fault",
            ErrorKind::DeadlineExceeded => "deadline-exceeded",
            ErrorKind::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
