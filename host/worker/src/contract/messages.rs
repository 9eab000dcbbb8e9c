//! The messages: what the host asks of a worker and what the worker answers.
//!
//! Plain data, no encoding in sight: [`super::codec`] turns them into frames and back.

use super::{ErrorKind, Launch, LaunchLimits};
use std::sync::Arc;
use tasklet_ptx::KernelInfo;

/// A request from host to worker. Borrowed fields point into the frame it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Ping,
    Alloc {
        bytes: u64,
    },
    /// As [`Request::Alloc`], memory another worker of the machine may copy from once it is
    /// exported ([`Request::Export`]): a group lease's buffers (cuda: `cuMemAlloc`, which the
    /// driver can share between processes, where `Alloc` may take memory from a pool).
    AllocShareable {
        bytes: u64,
    },
    /// Finish the queued work, then answer with [`Response::Exported`]: the handle through which
    /// another worker copies out of the allocation starting at `addr` (made by
    /// [`Request::AllocShareable`]). `unsupported` where this backend or allocation cannot.
    Export {
        addr: u64,
    },
    /// Copy `len` bytes from `offset` into the allocation another worker exported as `handle` to
    /// `dst` of this worker's memory, and wait for the copy (cuda: the exporting process's memory
    /// mapped here for the copy and unmapped after it; a peer copy between GPUs). `unsupported`
    /// where this worker cannot map the memory (no peer access between the GPUs), so the host
    /// stages the copy instead. The host checks the source range: the handle carries no size.
    CopyFromPeer {
        dst: u64,
        handle: &'a [u8],
        offset: u64,
        len: u64,
    },
    Free {
        addr: u64,
    },
    /// Payload: the first `len` bytes of the data region.
    ///
    /// `after`, on this and the other copies between host and device memory (`Read`,
    /// `WriteFrom`, `ReadInto`): `None`, the copy waits for every queued launch, as every other op
    /// does; `Some(n)`, it waits only for the launches numbered through `n` (0: none) and may run
    /// beside the later ones (cuda: on a copy stream of its own), as a copy on a tenant's stream
    /// that depends on no later kernel does. The copy is done when it is answered either way.
    Write {
        addr: u64,
        len: u64,
        after: Option<u64>,
    },
    /// A small write carrying its bytes in the frame: *posted* (no response), so it lives in
    /// the ring, not in the data region a later call uses. A failure is held and reported by the
    /// next call, as a posted launch's is. `after` as on `Write`.
    WriteInline {
        addr: u64,
        data: &'a [u8],
        after: Option<u64>,
    },
    /// Result: the worker fills the first `len` bytes of the data region.
    Read {
        addr: u64,
        len: u64,
        after: Option<u64>,
    },
    Copy {
        dst: u64,
        src: u64,
        len: u64,
    },
    LoadModule {
        ptx: &'a str,
    },
    LoadSource {
        source: &'a str,
        options: Vec<&'a str>,
    },
    /// As [`Request::LoadModule`], through the host's node-wide module cache: answered with
    /// [`Response::CachedModule`], carrying what the load compiled (cuda: the cubin the driver's
    /// linker made of `ptx`) for the host to keep. `image`, unless empty, is what an earlier load
    /// of exactly `ptx` compiled on a device like this one: the worker loads it without compiling
    /// (its kernel table still comes from `ptx`) and, should the device refuse it, compiles `ptx`
    /// instead and says so. A module the worker's own cache holds is a lookup before all that.
    LoadModuleCached {
        ptx: &'a str,
        image: &'a [u8],
    },
    /// As [`Request::LoadSource`], answered with [`Response::CachedModule`] carrying the PTX
    /// NVRTC produced (and, on cuda, the cubin compiled from it), for the host to keep.
    LoadSourceCached {
        source: &'a str,
        options: Vec<&'a str>,
    },
    UnloadModule {
        id: u32,
    },
    Launch(Launch<'a>),
    Sync,
    /// Free every allocation and unload every module: the worker goes back to its state at start.
    Reset,
    Info,
    /// Map guest memory `id`, whose memfd the host has just sent on the control socket tagged
    /// `id`, `capacity` bytes (`crate::host::guest_memory`). Replaces an earlier attachment of `id`.
    AttachMemory {
        id: u64,
        capacity: u64,
    },
    /// Drop the attachment of guest memory `id` (the host dropped the memory).
    DetachMemory {
        id: u64,
    },
    /// Write bytes `offset..offset+len` of attached guest memory `memory` at device `addr`.
    WriteFrom {
        addr: u64,
        memory: u64,
        offset: u64,
        len: u64,
        after: Option<u64>,
    },
    /// Read `len` bytes at device `addr` into attached guest memory `memory` at `offset`.
    ReadInto {
        addr: u64,
        memory: u64,
        offset: u64,
        len: u64,
        after: Option<u64>,
    },
    /// Record `ops` as a graph, in order, and make it ready to replay (cuda: build and
    /// instantiate a CUDA graph). Answered with [`Response::Graph`].
    GraphCreate {
        ops: Vec<GraphOp<'a>>,
    },
    /// Replace the argument block of node `node` (a launch) of graph `graph` for its next
    /// replays (cuda: the instantiated graph updated in place).
    GraphSetArgs {
        graph: u32,
        node: u32,
        args: &'a [u8],
    },
    /// Write `writes` (records of 16 bytes: a device address and the 8 bytes to put there, both
    /// little-endian), then replay graph `graph` `times` times, all in order with the worker's
    /// other work. Answered once the replays are queued (cuda) or done (emu); a kernel's fault
    /// comes back here or from the next op that waits.
    GraphReplay {
        graph: u32,
        times: u32,
        writes: &'a [u8],
    },
    GraphDestroy {
        graph: u32,
    },
    /// Make bytes `offset..offset+len` of attached memory `memory` (mapped memory: rings and
    /// control blocks, `super::actor`) visible to kernels, while the host keeps reading and
    /// writing them. Answered with [`Response::Allocated`]: the device address of `offset`.
    MapDevice {
        memory: u64,
        offset: u64,
        len: u64,
    },
    /// Undo the [`Request::MapDevice`] answered with `addr`.
    UnmapDevice {
        addr: u64,
    },
    /// Start a persistent kernel: it runs beside everything else the worker does, exempt from
    /// the launch deadline (`launch.deadline` is ignored), until it returns. Its control block is
    /// `CONTROL_BYTES` at `control` of attached memory `memory` (mapped with `MapDevice`): the
    /// worker marks it started before answering and ended, saying how, once the kernel is. The
    /// host stops a kernel by asking through the control block and, past a grace period, by
    /// ending the worker. What the worker writes there goes to the status block at `status` of
    /// attached memory `status_memory` too, which no kernel can reach (never mapped for the
    /// device): the host believes that one about the kernel's end.
    LaunchPersistent {
        launch: Launch<'a>,
        memory: u64,
        control: u64,
        status_memory: u64,
        status: u64,
    },
    /// Record mark `mark` (below [`super::marks::MAX_MARKS`]) behind everything sent before it:
    /// *posted* (no response), like a launch; a failure is held for the next call. Recording it
    /// again moves it (cuda: `cuEventRecord` of the mark's timed event on the worker's stream;
    /// the emulator, which runs each launch before the next request, notes its device time).
    RecordMark {
        mark: u32,
    },
    /// Answered with [`Response::Elapsed`]: the device time between the latest records of
    /// `start` and `end` (`end` recorded after `start`), once `end`'s work has finished: the
    /// wait is for the work before `end` only. `InvalidArgument` for a mark never recorded.
    MarkElapsed {
        start: u32,
        end: u32,
    },
    /// Answered with [`Response::MarkDone`] at once: whether the work before the latest record
    /// of `mark` has finished (a mark never recorded has).
    QueryMark {
        mark: u32,
    },
    /// Answered once the work before the latest record of `mark` has finished (a kernel's fault
    /// or missed deadline in it is the answer), not waiting for anything queued after it.
    WaitMark {
        mark: u32,
    },
}

/// One operation of a recorded graph ([`Request::GraphCreate`]), run in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraphOp<'a> {
    Launch(Launch<'a>),
    /// Copy `len` bytes from `src` to `dst` (ranges that do not overlap).
    Copy {
        dst: u64,
        src: u64,
        len: u64,
    },
    /// Set `len` bytes at `addr` (both multiples of 4) to `value`, repeated, little-endian.
    Fill {
        addr: u64,
        len: u64,
        value: u32,
    },
}

impl Request<'_> {
    pub fn name(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Alloc { .. } => "alloc",
            Request::AllocShareable { .. } => "alloc-shareable",
            Request::Export { .. } => "export",
            Request::CopyFromPeer { .. } => "copy-from-peer",
            Request::Free { .. } => "free",
            Request::Write { .. } => "write",
            Request::WriteInline { .. } => "write",
            Request::Read { .. } => "read",
            Request::Copy { .. } => "copy",
            Request::LoadModule { .. } => "load-module",
            Request::LoadSource { .. } => "load-source",
            Request::LoadModuleCached { .. } => "load-module-cached",
            Request::LoadSourceCached { .. } => "load-source-cached",
            Request::UnloadModule { .. } => "unload-module",
            Request::Launch(_) => "launch",
            Request::Sync => "sync",
            Request::Reset => "reset",
            Request::Info => "info",
            Request::AttachMemory { .. } => "attach-memory",
            Request::DetachMemory { .. } => "detach-memory",
            Request::WriteFrom { .. } => "write-from",
            Request::ReadInto { .. } => "read-into",
            Request::GraphCreate { .. } => "graph-create",
            Request::GraphSetArgs { .. } => "graph-set-args",
            Request::GraphReplay { .. } => "graph-replay",
            Request::GraphDestroy { .. } => "graph-destroy",
            Request::MapDevice { .. } => "map-device",
            Request::UnmapDevice { .. } => "unmap-device",
            Request::LaunchPersistent { .. } => "launch-persistent",
            Request::RecordMark { .. } => "record-mark",
            Request::MarkElapsed { .. } => "mark-elapsed",
            Request::QueryMark { .. } => "query-mark",
            Request::WaitMark { .. } => "wait-mark",
        }
    }
}

/// What a worker reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerInfo {
    /// `emu` or `cuda`.
    pub backend: String,
    /// Human-readable device name.
    pub device: String,
    /// Bytes of device memory this worker may allocate in all.
    pub memory_total: u64,
    /// Bytes allocated now (as the backend accounts them, i.e. rounded up to its granularity).
    pub memory_used: u64,
    pub allocations: u32,
    pub modules: u32,
    /// Bytes asked for by the live allocations, exactly (what the host's lease accounting counts).
    pub memory_requested: u64,
    /// The device's own memory in all (emu: the emulated size; cuda: `cuDeviceTotalMem`).
    pub device_memory: u64,
    /// Compute capability (major, minor); the emulator reports the target it emulates (8.0).
    pub compute_capability: (u32, u32),
    /// The device's UUID as NVML and nvidia-smi print it (`GPU-…`); empty for the emulator.
    pub uuid: String,
    /// The driver's CUDA version as `cuDriverGetVersion` reports it (12080 = 12.8); 0 for emu.
    pub driver_version: u32,
    /// Whether the data region is page-locked for the device (cuda with `cuMemHostRegister`
    /// succeeded), so writes and reads are DMA at pinned speed.
    pub pinned_data: bool,
    /// What one launch may ask of the device (cuda: the driver's device attributes; the
    /// emulator: [`LaunchLimits::SM_80`]). All zero where a backend reports none (no launch
    /// fits them).
    pub launch_limits: LaunchLimits,
}

/// A module's kernels in source order, with their parameters: shared, never copied per load.
pub type KernelTable = Arc<[KernelInfo]>;

/// A module as loaded into a worker: what a `load-module` or `load-source` is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    /// The worker's id for it: unique for the worker's lifetime (never reused, even after reset).
    pub id: u32,
    /// Its kernels in source order, with their parameter layouts. Shared: a repeated load of
    /// the same module (`host::module_aliases`) hands out this table, not a copy of it.
    pub kernels: KernelTable,
    /// Device memory the module's own `.global` variables take in this load
    /// (`tasklet_ptx::ModuleOutline::variable_bytes`): the host charges it to the lease.
    pub variable_bytes: u64,
    /// Bytes of the PTX this load holds loaded in the worker (for a CUDA C load, the PTX NVRTC
    /// made of it): the host holds a worker's modules within
    /// [`MAX_MODULE_TEXT_BYTES`](crate::contract::modules::MAX_MODULE_TEXT_BYTES).
    pub text_bytes: u64,
}

/// What a load compiled, for the host's node-wide module cache ([`Response::CachedModule`]).
/// Empty fields where the load compiled nothing (a lookup in the worker's own cache, an image
/// loaded as given, the emulator's PTX) or what it compiled does not fit the channel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compiled {
    /// The PTX NVRTC produced (a CUDA C load only).
    pub ptx: String,
    /// The device code compiled from the PTX (cuda: a cubin), loadable on a device of the same
    /// compute capability under the same driver.
    pub image: Vec<u8>,
    /// The image the request carried was refused by the device: the module was compiled from
    /// its text instead, and the host drops that image.
    pub image_refused: bool,
}

/// A response from worker to host. Owned: the host decodes it out of a buffer it reuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Success with nothing to report (ping, free, write, read, copy, unload, launch, sync, reset).
    Ok,
    Allocated {
        addr: u64,
    },
    Module(LoadedModule),
    /// A module loaded through the host's cache ([`Request::LoadModuleCached`],
    /// [`Request::LoadSourceCached`]): as [`Response::Module`], with what the load compiled.
    CachedModule {
        module: LoadedModule,
        compiled: Compiled,
    },
    Info(WorkerInfo),
    /// A graph made ready ([`Request::GraphCreate`]): the worker's id for it, never reused.
    Graph {
        id: u32,
    },
    /// An allocation exported ([`Request::Export`]): the handle another worker copies through.
    Exported {
        handle: Vec<u8>,
    },
    /// The time between two marks ([`Request::MarkElapsed`]), in nanoseconds.
    Elapsed {
        nanos: u64,
    },
    /// Whether a mark's work has finished ([`Request::QueryMark`]).
    MarkDone {
        done: bool,
    },
    Error {
        kind: ErrorKind,
        message: String,
    },
}
