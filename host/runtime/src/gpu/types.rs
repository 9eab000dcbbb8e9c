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
    ModuleId,
    /// A recorded graph of a session.
    GraphId
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
    /// Held now by buffers under the lease, and by the `.global` variables of its modules.
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
    /// `GPU-…`, `MIG-…`, or `emu-N` (empty where the host does not say).
    pub uuid: String,
    /// Leases on the device now.
    pub leases: u32,
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
    /// A by-value parameter holding device pointers: `bytes`, with each relocation's buffer
    /// address (plus its offset) written over the 8 bytes at its place before the launch.
    Relocated {
        bytes: &'a [u8],
        relocations: &'a [Relocation],
    },
}

/// Where a buffer's device address goes in a [`KernelArg::Relocated`]'s bytes: 8 bytes,
/// little-endian, at byte `at` (a multiple of 8, within the bytes), the address of `offset`
/// bytes into `buffer` (one of the launching session's, `offset` at most its size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relocation {
    pub at: u32,
    pub buffer: BufferId,
    pub offset: u64,
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
        if data.len() != self.len {
            return Err(vanished());
        }
        self.fill_at(0, data)
    }

    /// Copies `data` into the guest's bytes from `at` on (a read arriving in pieces); fails,
    /// copying nothing, when it does not fit or the memory is not one this host created.
    pub fn fill_at(&self, at: usize, data: &[u8]) -> Result<(), GpuError> {
        let fits = at
            .checked_add(data.len())
            .is_some_and(|end| end <= self.len);
        // SAFETY: `new`'s contract: the store's host call is running and no reference is live;
        // `at..at + len` lies within the bytes it names.
        if fits && unsafe { crate::guest_memory::copy_into_guest(self.addr + at, data) } {
            return Ok(());
        }
        Err(vanished())
    }
}

fn vanished() -> GpuError {
    GpuError::DeviceLost("the destination's memory vanished during mem-read-into".into())
}

/// The kernel a launch names: by name, or by its place in the module's kernel list (a kernel
/// handle, resolved once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelRef<'a> {
    Named(&'a str),
    At(u32),
}

/// Where a module comes from: PTX text, or CUDA C compiled (NVRTC) with options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleSource<'a> {
    Ptx(&'a str),
    Cuda {
        source: &'a str,
        options: &'a [String],
    },
}

/// How a kernel parameter is passed, as the module declares and uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A 64-bit integer parameter the kernel uses as a global memory address (its PTX shows the
    /// value reaching a load's, store's or atomic's address): it takes only a buffer of the
    /// launching session.
    Pointer,
    /// Any other parameter: a scalar (a 64-bit integer not seen used as an address takes a
    /// `u64` or a buffer), or a by-value struct or array.
    Value,
}

/// One parameter of a kernel: its place in the argument block and how it is passed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelParam {
    pub name: String,
    /// Bytes.
    pub size: u32,
    /// Alignment in bytes.
    pub align: u32,
    pub kind: ParamKind,
}

/// A kernel (entry) of a loaded module and its parameters, in declaration order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelSignature {
    pub name: String,
    pub params: Vec<KernelParam>,
}

impl From<&tasklet_worker::KernelInfo> for KernelSignature {
    fn from(info: &tasklet_worker::KernelInfo) -> KernelSignature {
        KernelSignature {
            name: info.name.clone(),
            params: info
                .params
                .iter()
                .map(|p| KernelParam {
                    name: p.name.clone(),
                    size: p.size,
                    align: p.align,
                    kind: if p.used_as_address {
                        ParamKind::Pointer
                    } else {
                        ParamKind::Value
                    },
                })
                .collect(),
        }
    }
}

/// An argument of a one-shot [`Submit`]: a pointer into the call's region, or a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SubmitArg<'a> {
    /// The device address of `offset` bytes into the region.
    Region { offset: u64 },
    /// A scalar or by-value argument; a buffer here is refused (a one-shot has no session).
    Value(KernelArg<'a>),
}

/// A one-shot: one kernel over one region of device memory, start to finish, in one call.
///
/// The service acquires a lease as `lease` asks, takes all of its memory as the call's *region*
/// (zeroed), writes `input` at its start, loads the module, launches `kernel` with `args` (where
/// [`SubmitArg::Region`] stands for an address in the region), waits for it, reads
/// `output_size` bytes from `output_offset` in the region, and ends the lease, whatever
/// happened. Each step is checked as the session operation of the same name is.
#[derive(Debug, Clone, Copy)]
pub struct Submit<'a> {
    pub lease: LeaseRequest,
    pub module: ModuleSource<'a>,
    pub kernel: &'a str,
    pub config: LaunchConfig,
    pub args: &'a [SubmitArg<'a>],
    pub input: &'a [u8],
    pub output_offset: u64,
    pub output_size: u64,
}

/// The most launches one burst may hold: the argument blocks of a whole burst are built and
/// checked before any launch is queued, so the bound keeps that work (and the host memory it
/// takes) small.
pub const MAX_BURST_LAUNCHES: usize = 4096;
/// The most changed arguments one burst may hold, over all of its launches (as much as one
/// request to a node carries): each is lifted and checked before any launch is queued.
pub const MAX_BURST_CHANGES: usize = 64 << 10;

/// Refuses a burst of more launches or changed arguments than one call may hold: checked before
/// any argument is resolved or lifted, so an oversized burst costs the host nothing.
pub fn check_burst_size(launches: usize, changes: usize) -> Result<(), GpuError> {
    if launches > MAX_BURST_LAUNCHES {
        return Err(GpuError::InvalidArgument(format!(
            "a burst of {launches} launches is more than the {MAX_BURST_LAUNCHES} one call may hold; split it into several"
        )));
    }
    if changes > MAX_BURST_CHANGES {
        return Err(GpuError::InvalidArgument(format!(
            "a burst changing {changes} arguments is more than the {MAX_BURST_CHANGES} (MAX_BURST_CHANGES) one call may hold; split it into several"
        )));
    }
    Ok(())
}

/// One argument a launch of a [`Burst`] changes: the burst's argument at `index`, replaced by
/// `arg` for that launch (a scalar, or a buffer at another offset).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstArg<'a> {
    pub index: u32,
    pub arg: KernelArg<'a>,
}

/// One kernel launched many times in one call: launch `i` takes `args` with the changes of its
/// own, the next `counts[i]` entries of `changes` (flat, so a burst of thousands of launches is
/// three slices, not a list of lists). Every launch is checked as a single launch is, all of them
/// before any is queued.
#[derive(Debug, Clone, Copy)]
pub struct Burst<'a> {
    pub config: LaunchConfig,
    pub args: &'a [KernelArg<'a>],
    pub changes: &'a [BurstArg<'a>],
    /// One entry per launch: how many of `changes`, in order, are that launch's.
    pub counts: &'a [u32],
}

/// The most ops one graph may record.
pub const MAX_GRAPH_NODES: usize = 1024;
/// The most device scalars one graph may hold.
pub const MAX_GRAPH_SCALARS: usize = 32;
/// The most replays one call may ask for: a replay call's time (and on the emulator, the call
/// itself runs them all) stays bounded.
pub const MAX_GRAPH_REPLAYS: u32 = 4096;
/// The most graphs a session may hold at once.
pub const MAX_SESSION_GRAPHS: usize = 64;
/// The most bytes of recorded launch arguments a session's graphs may hold together: the host
/// keeps every recorded launch's argument block until its graph is dropped, and this bounds that
/// memory (a full graph of 1024 launches of 16 KiB of arguments each fits).
pub const MAX_SESSION_GRAPH_ARG_BYTES: usize = 16 << 20;
/// The most sessions one lease may have open at once: each holds host state (its graphs' records
/// among it), so their number is bounded.
pub const MAX_LEASE_SESSIONS: usize = 64;

/// An argument of a launch recorded in a graph: a kernel argument, or the device address of one
/// of the graph's device scalars (8 bytes the graph holds, set between replays).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GraphArg<'a> {
    Arg(KernelArg<'a>),
    Scalar(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds the burst glue checks before it resolves or lifts anything.
    #[test]
    fn a_burst_past_either_bound_is_refused_naming_it() {
        assert!(check_burst_size(MAX_BURST_LAUNCHES, MAX_BURST_CHANGES).is_ok());
        let launches = check_burst_size(MAX_BURST_LAUNCHES + 1, 0);
        assert!(
            matches!(&launches, Err(GpuError::InvalidArgument(m)) if m.contains("more than the 4096")),
            "{launches:?}"
        );
        let changes = check_burst_size(1, MAX_BURST_CHANGES + 1);
        assert!(
            matches!(&changes, Err(GpuError::InvalidArgument(m)) if m.contains("MAX_BURST_CHANGES")),
            "{changes:?}"
        );
    }

    /// Bytes outside guest memory this host made, or past the end, are refused and left as
    /// they were.
    #[test]
    fn guest_bytes_are_filled_only_where_they_are_guest_memory_and_fit() {
        let mut plain = vec![9u8; 64];
        // SAFETY: nothing else refers to `plain` while the value is used.
        let bytes = unsafe { GuestBytes::new(plain.as_mut_ptr() as usize, plain.len()) };
        assert!(bytes.fill_at(0, &[1; 8]).is_err(), "not a guest memory");
        assert!(bytes.fill_at(60, &[1; 8]).is_err(), "past the end");
        assert!(
            bytes.fill_at(usize::MAX, &[1]).is_err(),
            "an offset that overflows"
        );
        assert!(bytes.fill(&[1; 63]).is_err(), "a length that differs");
        assert!(plain.iter().all(|&b| b == 9));
    }
}
