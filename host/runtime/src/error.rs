//! The host's own GPU error: one case per way a GPU operation can fail, each carrying a one-line
//! cause and, where there is one, the fix.
//!
//! The lease manager and the capability checks speak this type; the `tasklet:gpu` glue converts it
//! to the generated `gpu-error` at the edge, and the node's wire protocol to its statuses, so
//! neither the core nor a transport depends on the other's representation.

use tasklet_worker::{ErrorKind, WorkerError};

/// The cause of any case: every case carries exactly one message.
macro_rules! cause {
    ($e:expr) => {
        match $e {
            GpuError::Unauthorized(m)
            | GpuError::LeaseExpired(m)
            | GpuError::CapacityExceeded(m)
            | GpuError::QuotaExceeded(m)
            | GpuError::OutOfBounds(m)
            | GpuError::InvalidArgument(m)
            | GpuError::LoadFailed(m)
            | GpuError::LaunchFailed(m)
            | GpuError::KernelFault(m)
            | GpuError::DeadlineExceeded(m)
            | GpuError::DeviceLost(m)
            | GpuError::Unsupported(m) => m,
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// The tasklet's grant lacks a right; the text names it.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The lease has ended (expired, dropped, or its worker was replaced).
    #[error("lease expired: {0}")]
    LeaseExpired(String),
    /// The node cannot grant a lease that large, or has no free worker.
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// The lease or the grant has no room for this allocation or lease.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// An offset or length falls outside the buffer it names.
    #[error("out of bounds: {0}")]
    OutOfBounds(String),
    /// A malformed argument: a foreign handle, a wrong kernel argument, a zero size.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A module did not parse, validate or compile.
    #[error("load failed: {0}")]
    LoadFailed(String),
    /// A launch was refused before it ran.
    #[error("launch failed: {0}")]
    LaunchFailed(String),
    /// A kernel faulted.
    #[error("kernel fault: {0}")]
    KernelFault(String),
    /// A kernel or operation ran past its deadline and was stopped.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The worker (or node) serving the lease died or stopped answering; the lease is gone.
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// Not supported by this node's backend; the text says what would be.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl GpuError {
    /// The kebab-case name of the case, as the WIT contract, users and logs spell it.
    pub fn name(&self) -> &'static str {
        match self {
            GpuError::Unauthorized(_) => "unauthorized",
            GpuError::LeaseExpired(_) => "lease-expired",
            GpuError::CapacityExceeded(_) => "capacity-exceeded",
            GpuError::QuotaExceeded(_) => "quota-exceeded",
            GpuError::OutOfBounds(_) => "out-of-bounds",
            GpuError::InvalidArgument(_) => "invalid-argument",
            GpuError::LoadFailed(_) => "load-failed",
            GpuError::LaunchFailed(_) => "launch-failed",
            GpuError::KernelFault(_) => "kernel-fault",
            GpuError::DeadlineExceeded(_) => "deadline-exceeded",
            GpuError::DeviceLost(_) => "device-lost",
            GpuError::Unsupported(_) => "unsupported",
        }
    }

    /// The cause, without the case's name.
    pub fn message(&self) -> &str {
        cause!(self)
    }

    /// Takes the cause out (for conversions at the edges).
    pub fn into_message(self) -> String {
        cause!(self)
    }

    /// The same case, its cause preceded by `what` and a colon: says which part of a larger
    /// call (a burst's launch, a graph's node) the error is about.
    pub fn within(mut self, what: &str) -> GpuError {
        let m = cause!(&mut self);
        m.insert_str(0, &format!("{what}: "));
        self
    }
}

impl From<WorkerError> for GpuError {
    /// A worker's failure as the lease sees it. `Lost` means the lease is gone with its worker.
    fn from(e: WorkerError) -> GpuError {
        match e {
            WorkerError::Op { kind, message } => match kind {
                ErrorKind::OutOfMemory => {
                    GpuError::CapacityExceeded(format!("device out of memory: {message}"))
                }
                ErrorKind::OutOfBounds => GpuError::OutOfBounds(message),
                ErrorKind::InvalidArgument => GpuError::InvalidArgument(message),
                ErrorKind::LoadFailed => GpuError::LoadFailed(message),
                ErrorKind::LaunchFailed => GpuError::LaunchFailed(message),
                ErrorKind::KernelFault => GpuError::KernelFault(message),
                ErrorKind::DeadlineExceeded => GpuError::DeadlineExceeded(message),
                ErrorKind::Unsupported => GpuError::Unsupported(message),
            },
            WorkerError::Lost(m) => {
                GpuError::DeviceLost(format!("the GPU worker for this lease was lost: {m}"))
            }
            WorkerError::Spawn(m) => {
                GpuError::DeviceLost(format!("could not start a GPU worker: {m}"))
            }
            WorkerError::NoCapacity(m) => GpuError::CapacityExceeded(m),
        }
    }
}

/// Shorthands for the cases the checks build most, with a formatted cause.
pub fn unauthorized(m: impl Into<String>) -> GpuError {
    GpuError::Unauthorized(m.into())
}
pub fn invalid(m: impl Into<String>) -> GpuError {
    GpuError::InvalidArgument(m.into())
}
pub fn out_of_bounds(m: impl Into<String>) -> GpuError {
    GpuError::OutOfBounds(m.into())
}
pub fn quota(m: impl Into<String>) -> GpuError {
    GpuError::QuotaExceeded(m.into())
}
pub fn unsupported(m: impl Into<String>) -> GpuError {
    GpuError::Unsupported(m.into())
}

/// Guest input as an error may quote it: at most [`QUOTE_MAX`] bytes of it (cut on a character
/// boundary), so that no error echoes a megabyte a tenant sent.
pub fn quoted(input: &str) -> String {
    if input.len() <= QUOTE_MAX {
        return format!("{input:?}");
    }
    let mut end = QUOTE_MAX;
    while !input.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &input[..end], input.len())
}

/// A launch of a kernel the module does not have (`asked`: `no kernel named "x"`, or `no
/// kernel #3`), naming the ones it has: one message wherever the module is looked in.
pub fn no_such_kernel(asked: &str, names: &[&str]) -> GpuError {
    GpuError::LaunchFailed(format!(
        "{asked} in the module; it has: {}",
        quoted(&names.join(", "))
    ))
}

/// Most bytes of guest input an error quotes.
pub const QUOTE_MAX: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_leads_with_the_cause_and_name_is_the_wit_spelling() {
        let e = quota("too much");
        assert_eq!(e.name(), "quota-exceeded");
        assert_eq!(e.message(), "too much");
        assert_eq!(e.to_string(), "quota exceeded: too much");
    }

    #[test]
    fn quotes_are_bounded_and_cut_on_a_character_boundary() {
        assert_eq!(quoted("iota"), "\"iota\"");
        let long = "é".repeat(1 << 20);
        let q = quoted(&long);
        assert!(q.len() < 2 * QUOTE_MAX, "{q}");
        assert!(q.ends_with(&format!("({} bytes)", long.len())), "{q}");
    }

    #[test]
    fn a_lost_worker_is_a_lost_device() {
        let e = GpuError::from(WorkerError::Lost("killed".into()));
        assert_eq!(e.name(), "device-lost");
        assert!(e.message().contains("killed"));
    }
}
