//! Errors: the WIT `gpu-error` cases, plus the SDK's own input checks.

use core::fmt;

use crate::raw::types::GpuError;

/// `Result<T, tasklet_gpu::Error>`.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Why a GPU operation failed.
///
/// Every case but [`Error::InvalidInput`] mirrors a case of the WIT `gpu-error` variant and carries
/// the host's one-line message. Where the SDK checks an argument before calling the host, it
/// reports what the host would have ([`Error::OutOfBounds`] for a range past the end of a buffer,
/// [`Error::InvalidArgument`] for a buffer of another session); [`Error::InvalidInput`] is for
/// mistakes that could not even be expressed to the host (a byte length that overflows `u64`, an
/// element count that does not fit a kernel's `u32`, a launch without a configuration).
///
/// Displays as `<kind>: <message>`, e.g. `quota-exceeded: lease has 1048576 bytes, 0 free`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The tasklet's manifest (or the node's policy) lacks a right; the text names it.
    Unauthorized(String),
    /// The lease under this handle has ended (expired, dropped, or its worker was replaced).
    LeaseExpired(String),
    /// The node cannot grant a lease that large, or has no free worker.
    CapacityExceeded(String),
    /// The lease or the tasklet's grant has no room for this allocation or lease.
    QuotaExceeded(String),
    /// An offset or length falls outside the buffer it names.
    OutOfBounds(String),
    /// An argument is malformed: a foreign handle, a wrong kernel argument, a zero size.
    InvalidArgument(String),
    /// A module did not parse, validate or compile; the text names the line.
    LoadFailed(String),
    /// A launch was refused before it ran: unknown kernel, bad grid or block.
    LaunchFailed(String),
    /// A kernel faulted (illegal address, misaligned access, trap); the text names where.
    KernelFault(String),
    /// A kernel or operation ran past its deadline and was stopped.
    DeadlineExceeded(String),
    /// The worker serving this lease died or stopped answering; the lease is gone.
    DeviceLost(String),
    /// The operation is not supported by this node's backend; the text says what would be.
    Unsupported(String),
    /// Found by the SDK before any host call: arithmetic overflow, a value out of a kernel
    /// parameter's range, an incomplete builder. Not a WIT case.
    InvalidInput(String),
}

/// The kind of an [`Error`], without its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// WIT `unauthorized`.
    Unauthorized,
    /// WIT `lease-expired`.
    LeaseExpired,
    /// WIT `capacity-exceeded`.
    CapacityExceeded,
    /// WIT `quota-exceeded`.
    QuotaExceeded,
    /// WIT `out-of-bounds`.
    OutOfBounds,
    /// WIT `invalid-argument`.
    InvalidArgument,
    /// WIT `load-failed`.
    LoadFailed,
    /// WIT `launch-failed`.
    LaunchFailed,
    /// WIT `kernel-fault`.
    KernelFault,
    /// WIT `deadline-exceeded`.
    DeadlineExceeded,
    /// WIT `device-lost`.
    DeviceLost,
    /// WIT `unsupported`.
    Unsupported,
    /// The SDK's own checks (`invalid-input`; not a WIT case).
    InvalidInput,
}

impl ErrorKind {
    /// Every kind, in WIT declaration order, [`ErrorKind::InvalidInput`] last.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::Unauthorized,
        ErrorKind::LeaseExpired,
        ErrorKind::CapacityExceeded,
        ErrorKind::QuotaExceeded,
        ErrorKind::OutOfBounds,
        ErrorKind::InvalidArgument,
        ErrorKind::LoadFailed,
        ErrorKind::LaunchFailed,
        ErrorKind::KernelFault,
        ErrorKind::DeadlineExceeded,
        ErrorKind::DeviceLost,
        ErrorKind::Unsupported,
        ErrorKind::InvalidInput,
    ];

    /// The WIT case name, in kebab case (`"quota-exceeded"`); `"invalid-input"` for the SDK's own.
    ///
    /// ```
    /// assert_eq!(tasklet_gpu::ErrorKind::QuotaExceeded.as_str(), "quota-exceeded");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::LeaseExpired => "lease-expired",
            ErrorKind::CapacityExceeded => "capacity-exceeded",
            ErrorKind::QuotaExceeded => "quota-exceeded",
            ErrorKind::OutOfBounds => "out-of-bounds",
            ErrorKind::InvalidArgument => "invalid-argument",
            ErrorKind::LoadFailed => "load-failed",
            ErrorKind::LaunchFailed => "launch-failed",
            ErrorKind::KernelFault => "kernel-fault",
            ErrorKind::DeadlineExceeded => "deadline-exceeded",
            ErrorKind::DeviceLost => "device-lost",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidInput => "invalid-input",
        }
    }

    /// The kind named by a kebab-case name, the inverse of [`ErrorKind::as_str`].
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether the error means the lease is gone: nothing under it works any more, and only a new
    /// lease helps.
    pub const fn ends_lease(self) -> bool {
        matches!(self, ErrorKind::LeaseExpired | ErrorKind::DeviceLost)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        let m = message.into();
        match kind {
            ErrorKind::Unauthorized => Error::Unauthorized(m),
            ErrorKind::LeaseExpired => Error::LeaseExpired(m),
            ErrorKind::CapacityExceeded => Error::CapacityExceeded(m),
            ErrorKind::QuotaExceeded => Error::QuotaExceeded(m),
            ErrorKind::OutOfBounds => Error::OutOfBounds(m),
            ErrorKind::InvalidArgument => Error::InvalidArgument(m),
            ErrorKind::LoadFailed => Error::LoadFailed(m),
            ErrorKind::LaunchFailed => Error::LaunchFailed(m),
            ErrorKind::KernelFault => Error::KernelFault(m),
            ErrorKind::DeadlineExceeded => Error::DeadlineExceeded(m),
            ErrorKind::DeviceLost => Error::DeviceLost(m),
            ErrorKind::Unsupported => Error::Unsupported(m),
            ErrorKind::InvalidInput => Error::InvalidInput(m),
        }
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Error {
        Error::InvalidInput(message.into())
    }

    /// The error's kind.
    ///
    /// ```
    /// use tasklet_gpu::{Error, ErrorKind};
    /// let e = Error::LeaseExpired("lease 3 expired 12 ms ago".into());
    /// assert_eq!(e.kind(), ErrorKind::LeaseExpired);
    /// assert_eq!(e.kind().as_str(), "lease-expired");
    /// assert_eq!(e.to_string(), "lease-expired: lease 3 expired 12 ms ago");
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Unauthorized(_) => ErrorKind::Unauthorized,
            Error::LeaseExpired(_) => ErrorKind::LeaseExpired,
            Error::CapacityExceeded(_) => ErrorKind::CapacityExceeded,
            Error::QuotaExceeded(_) => ErrorKind::QuotaExceeded,
            Error::OutOfBounds(_) => ErrorKind::OutOfBounds,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::LoadFailed(_) => ErrorKind::LoadFailed,
            Error::LaunchFailed(_) => ErrorKind::LaunchFailed,
            Error::KernelFault(_) => ErrorKind::KernelFault,
            Error::DeadlineExceeded(_) => ErrorKind::DeadlineExceeded,
            Error::DeviceLost(_) => ErrorKind::DeviceLost,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
        }
    }

    /// The human-readable cause (without the kind).
    pub fn message(&self) -> &str {
        match self {
            Error::Unauthorized(m)
            | Error::LeaseExpired(m)
            | Error::CapacityExceeded(m)
            | Error::QuotaExceeded(m)
            | Error::OutOfBounds(m)
            | Error::InvalidArgument(m)
            | Error::LoadFailed(m)
            | Error::LaunchFailed(m)
            | Error::KernelFault(m)
            | Error::DeadlineExceeded(m)
            | Error::DeviceLost(m)
            | Error::Unsupported(m)
            | Error::InvalidInput(m) => m,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Error {}

impl From<GpuError> for Error {
    fn from(e: GpuError) -> Error {
        match e {
            GpuError::Unauthorized(m) => Error::Unauthorized(m),
            GpuError::LeaseExpired(m) => Error::LeaseExpired(m),
            GpuError::CapacityExceeded(m) => Error::CapacityExceeded(m),
            GpuError::QuotaExceeded(m) => Error::QuotaExceeded(m),
            GpuError::OutOfBounds(m) => Error::OutOfBounds(m),
            GpuError::InvalidArgument(m) => Error::InvalidArgument(m),
            GpuError::LoadFailed(m) => Error::LoadFailed(m),
            GpuError::LaunchFailed(m) => Error::LaunchFailed(m),
            GpuError::KernelFault(m) => Error::KernelFault(m),
            GpuError::DeadlineExceeded(m) => Error::DeadlineExceeded(m),
            GpuError::DeviceLost(m) => Error::DeviceLost(m),
            GpuError::Unsupported(m) => Error::Unsupported(m),
        }
    }
}

/// So that `?` works in a `run` function returning `Result<_, String>`; the string is the
/// `Display` form, `<kind>: <message>`.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// A name the caller gave (a kernel's, usually) as the SDK's own errors quote it: at most
/// [`QUOTE_MAX`] bytes of it, cut on a character boundary, with its length when cut; the host
/// quotes what a tasklet sent it the same way.
pub(crate) fn quoted(name: &str) -> String {
    if name.len() <= QUOTE_MAX {
        return format!("{name:?}");
    }
    let mut end = QUOTE_MAX;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &name[..end], name.len())
}

/// Most bytes of a caller's name an SDK error quotes.
const QUOTE_MAX: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_bounded() {
        assert_eq!(quoted("iota"), "\"iota\"");
        let long = "é".repeat(1000);
        let q = quoted(&long);
        assert!(q.ends_with("… (2000 bytes)"), "{q}");
        assert!(q.len() < QUOTE_MAX + 24, "{q}");
    }

    #[test]
    fn kind_names_are_the_wit_case_names() {
        let names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "unauthorized",
                "lease-expired",
                "capacity-exceeded",
                "quota-exceeded",
                "out-of-bounds",
                "invalid-argument",
                "load-failed",
                "launch-failed",
                "kernel-fault",
                "deadline-exceeded",
                "device-lost",
                "unsupported",
                "invalid-input",
            ]
        );
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(ErrorKind::from_name("nope"), None);
    }

    #[test]
    fn every_kind_round_trips_through_new() {
        for k in ErrorKind::ALL {
            let e = Error::new(k, "why");
            assert_eq!(e.kind(), k);
            assert_eq!(e.message(), "why");
            assert_eq!(e.to_string(), format!("{}: why", k.as_str()));
        }
    }

    #[test]
    fn gpu_errors_map_case_for_case() {
        let cases = [
            (GpuError::Unauthorized("m".into()), ErrorKind::Unauthorized),
            (GpuError::LeaseExpired("m".into()), ErrorKind::LeaseExpired),
            (
                GpuError::CapacityExceeded("m".into()),
                ErrorKind::CapacityExceeded,
            ),
            (
                GpuError::QuotaExceeded("m".into()),
                ErrorKind::QuotaExceeded,
            ),
            (GpuError::OutOfBounds("m".into()), ErrorKind::OutOfBounds),
            (
                GpuError::InvalidArgument("m".into()),
                ErrorKind::InvalidArgument,
            ),
            (GpuError::LoadFailed("m".into()), ErrorKind::LoadFailed),
            (GpuError::LaunchFailed("m".into()), ErrorKind::LaunchFailed),
            (GpuError::KernelFault("m".into()), ErrorKind::KernelFault),
            (
                GpuError::DeadlineExceeded("m".into()),
                ErrorKind::DeadlineExceeded,
            ),
            (GpuError::DeviceLost("m".into()), ErrorKind::DeviceLost),
            (GpuError::Unsupported("m".into()), ErrorKind::Unsupported),
        ];
        for (g, k) in cases {
            let e = Error::from(g);
            assert_eq!((e.kind(), e.message()), (k, "m"));
        }
    }

    #[test]
    fn converts_to_string_for_run() {
        fn run() -> core::result::Result<(), String> {
            Err(Error::QuotaExceeded("2 MiB asked, 1 MiB free".into()))?;
            Ok(())
        }
        assert_eq!(
            run(),
            Err("quota-exceeded: 2 MiB asked, 1 MiB free".to_string())
        );
    }
}
