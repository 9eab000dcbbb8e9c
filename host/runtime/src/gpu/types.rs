//! The values GPU operations take and return, free of any binding's representation.

use crate::error::GpuError;
use tasklet_worker::guest_memory::{locate, GuestSpan};

/// Ids of what a [`super::GpuService`] hands out. Each kind has its own type so that a buffer id
/// can never be passed where a session is meant.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident),*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    )*};
}

ids!(
    /// A lease: device memory granted for a time.
    LeaseId,
    /// A session under a lease.
    SessionId,
    /// Device memory of a session.
    BufferId,
    /// A loaded module of a session.
    ModuleId
);

/// What a lease asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRequest {
    /// At least this many bytes of device memory.
    pub min_vram: u64,
    /// For this many seconds from now.
    pub secs: u32,
    /// A device index; any device when absent.
    pub device: Option<u32>,
}

/// A lease as its holder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseInfo {
    pub device: u32,
    /// The most the sessions under the lease may hold at once.
    pub granted_bytes: u64,
    /// Held now by buffers under the lease.
    pub used_bytes: u64,
    pub remaining_ms: u64,
}

/// A device a tasklet may lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    /// `cuda` or `emu`.
    pub backend: String,
    pub total_memory: u64,
    /// Bytes not yet granted to leases.
    pub free_memory: u64,
    pub compute_capability: (u32, u32),
}

/// A launch's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory per block.
    pub shared_mem_bytes: u32,
}

/// One kernel argument. Pointers are never passed as numbers: a `Buffer` names one of the
/// session's buffers and a byte offset in it, and the service puts its device address in place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg<'a> {
    Buffer {
        buffer: BufferId,
        offset: u64,
    },
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
    /// A by-value parameter (e.g. a struct), length-checked against the kernel's declaration.
    Bytes(&'a [u8]),
}

/// Bytes of the tasklet's own linear memory that a read fills in place.
///
/// Holds an address, not a reference: while a worker process writes into the memory through its
/// own mapping, no Rust reference to those bytes may be live in this process.
#[derive(Debug)]
pub struct GuestBytes {
    addr: usize,
    len: usize,
}

impl GuestBytes {
    /// # Safety
    ///
    /// `addr..addr + len` is linear memory of the store whose host call is running now (so no
    /// guest code runs), and no reference into those bytes is live while this value is used.
    pub unsafe fn new(addr: usize, len: usize) -> GuestBytes {
        GuestBytes { addr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the bytes lie in a memory GPU workers can map; `None` for a memory this host did not
    /// create.
    pub fn span(&self) -> Option<GuestSpan> {
        locate(self.addr as *const u8, self.len)
    }

    /// Copies `data` (exactly `len` bytes) into the guest's bytes; fails, copying nothing, when
    /// the lengths differ or the memory is not one this host created.
    pub fn fill(&self, data: &[u8]) -> Result<(), GpuError> {
        // SAFETY: `new`'s contract: the store's host call is running and no reference is live.
        let filled = data.len() == self.len
            && unsafe { crate::guest_memory::copy_into_guest(self.addr, data) };
        if filled {
            return Ok(());
        }
        Err(GpuError::DeviceLost(
            "the destination's memory vanished during mem-read-into".into(),
        ))
    }
}
