//! The operations a lease performs on its worker, one method each.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::calls::later;
use super::Persistent;
use super::Worker;
use crate::contract::actor::{ControlBlock, CONTROL_BYTES};
use crate::contract::channel::Answer;
use crate::contract::messages::GraphOp;
use crate::contract::modules::{MAX_MODULES, MAX_MODULE_TEXT_BYTES};
use crate::contract::{Compiled, ErrorKind, Launch, LoadedModule, Request, Response, WorkerInfo};
use crate::host::error::WorkerError;
use crate::host::guest_memory::GuestSpan;
use crate::host::mapped::{ActorView, MappedArea, Piece, STATUS_AREA_BYTES};

/// The largest write posted with its bytes in the ring ([`Worker::write`]): the bytes are
/// copied once more than through the data region, which for more than this costs about what
/// the answer's hand-off saves.
pub const INLINE_WRITE_MAX: usize = 8 << 10;

/// `TASKLET_INLINE_WRITES=0` in the host's environment makes every write a call, answered (to
/// compare both ways on one machine; see docs/performance.md, "Small transfers").
pub const INLINE_WRITES_ENV: &str = "TASKLET_INLINE_WRITES";

/// Whether small writes are posted (read once per process).
fn inline_writes() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(INLINE_WRITES_ENV).is_none_or(|v| v != "0"))
}

impl Worker {
    pub fn ping(&mut self) -> Result<(), WorkerError> {
        self.call_ok(&Request::Ping)
    }

    pub fn info(&mut self) -> Result<WorkerInfo, WorkerError> {
        match self.call(&Request::Info, self.op_timeout)? {
            Response::Info(i) => Ok(i),
            other => Err(self.unexpected("info", &other)),
        }
    }

    pub fn alloc(&mut self, bytes: u64) -> Result<u64, WorkerError> {
        match self.call(&Request::Alloc { bytes }, self.op_timeout)? {
            Response::Allocated { addr } => Ok(addr),
            other => Err(self.unexpected("alloc", &other)),
        }
    }

    /// As [`Worker::alloc`], memory [`Worker::export`] can hand to another worker.
    pub fn alloc_shareable(&mut self, bytes: u64) -> Result<u64, WorkerError> {
        match self.call(&Request::AllocShareable { bytes }, self.op_timeout)? {
            Response::Allocated { addr } => Ok(addr),
            other => Err(self.unexpected("alloc-shareable", &other)),
        }
    }

    /// Waits for this worker's queued work, then returns the handle through which another worker
    /// copies out of the allocation at `addr` ([`Worker::copy_from_peer`]). Fails `unsupported`
    /// where the backend, the driver or the allocation (not made by
    /// [`Worker::alloc_shareable`]) cannot be shared.
    pub fn export(&mut self, addr: u64) -> Result<Vec<u8>, WorkerError> {
        match self.call(&Request::Export { addr }, self.op_timeout)? {
            Response::Exported { handle } => Ok(handle),
            other => Err(self.unexpected("export", &other)),
        }
    }

    /// Copies `len` bytes at `offset` of the allocation another worker exported as `handle` to
    /// `dst`, and waits for the copy. The caller checks the source range (the worker cannot: the
    /// handle says no size) and keeps the exporter's allocation alive until this returns. Fails
    /// `unsupported` where this worker cannot reach the other's memory.
    pub fn copy_from_peer(
        &mut self,
        dst: u64,
        handle: &[u8],
        offset: u64,
        len: u64,
    ) -> Result<(), WorkerError> {
        let req = Request::CopyFromPeer {
            dst,
            handle,
            offset,
            len,
        };
        self.transfer(&req, usize::try_from(len).unwrap_or(usize::MAX))
    }

    pub fn free(&mut self, addr: u64) -> Result<(), WorkerError> {
        self.call_ok(&Request::Free { addr })
    }

    /// Writes `data` at device address `addr`, after every launch so far: up to
    /// [`INLINE_WRITE_MAX`] bytes posted in the ring, without waiting for the worker (a failure
    /// is reported by the next call that waits, naming the write); more through the data region
    /// in chunks of its size, each answered.
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), WorkerError> {
        self.write_after(addr, data, None)
    }

    /// [`Worker::write`] after only the launches numbered through `after` where it says (the
    /// copies' `after`, [`Request::Write`]): the copy may run beside the later ones.
    pub fn write_after(
        &mut self,
        addr: u64,
        data: &[u8],
        after: Option<u64>,
    ) -> Result<(), WorkerError> {
        self.usable()?;
        // Beside a persistent kernel a write is answered once its bytes are on the device: the
        // tenant may tell the kernel through a ring (no request to the worker) to read them.
        if !data.is_empty()
            && data.len() <= INLINE_WRITE_MAX
            && self.persistent.is_empty()
            && inline_writes()
        {
            // Posted with its bytes, like a launch: the worker's error, if any, comes with the
            // next call's answer. Larger writes are answered: copying their bytes through the
            // ring would cost more than the answer's hand-off.
            self.encode(&Request::WriteInline { addr, data, after });
            return self.post_frame("write");
        }
        // The data region is free: the last call was answered, and posted frames never use it.
        let chunk = self.chan.data_size();
        if data.is_empty() {
            return self.call_ok(&Request::Write {
                addr,
                len: 0,
                after,
            });
        }
        for (i, part) in data.chunks(chunk).enumerate() {
            let at = offset(addr, i * chunk)?;
            self.chan
                .write_data(part)
                .map_err(|e| WorkerError::op(ErrorKind::InvalidArgument, e.to_string()))?;
            self.call_ok(&Request::Write {
                addr: at,
                len: part.len() as u64,
                after,
            })?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at device address `addr`, in chunks of the data region's size,
    /// after every launch so far.
    pub fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), WorkerError> {
        self.read_after(addr, out, None)
    }

    /// [`Worker::read`] after only the launches numbered through `after` where it says
    /// ([`Worker::write_after`]).
    pub fn read_after(
        &mut self,
        addr: u64,
        out: &mut [u8],
        after: Option<u64>,
    ) -> Result<(), WorkerError> {
        self.usable()?;
        let chunk = self.chan.data_size();
        if out.is_empty() {
            return self.call_ok(&Request::Read {
                addr,
                len: 0,
                after,
            });
        }
        for (i, part) in out.chunks_mut(chunk).enumerate() {
            let at = offset(addr, i * chunk)?;
            self.call_ok(&Request::Read {
                addr: at,
                len: part.len() as u64,
                after,
            })?;
            self.chan
                .read_data(part)
                .map_err(|e| WorkerError::op(ErrorKind::InvalidArgument, e.to_string()))?;
        }
        Ok(())
    }

    /// Writes the guest bytes `src` at device address `addr`: the worker copies straight from its
    /// own mapping of the memory (one pinned DMA on cuda). Attaches the memory to this worker on
    /// first use (and detaches memories the host has dropped since). Errors as [`Worker::write`].
    pub fn write_from(&mut self, addr: u64, src: &GuestSpan) -> Result<(), WorkerError> {
        self.write_from_after(addr, src, None)
    }

    /// [`Worker::write_from`] after only the launches numbered through `after` where it says
    /// ([`Worker::write_after`]).
    pub fn write_from_after(
        &mut self,
        addr: u64,
        src: &GuestSpan,
        after: Option<u64>,
    ) -> Result<(), WorkerError> {
        self.usable()?;
        self.attach(src)?;
        let req = Request::WriteFrom {
            addr,
            memory: src.memory_id(),
            offset: src.offset() as u64,
            len: src.len() as u64,
            after,
        };
        self.transfer(&req, src.len())
    }

    /// Reads `dst.len()` bytes at device address `addr` into the guest memory span `dst`, in
    /// place. Attaches as [`Worker::write_from`]; errors as [`Worker::read`]. On an error the span
    /// may hold part of the data.
    pub fn read_into(&mut self, addr: u64, dst: &GuestSpan) -> Result<(), WorkerError> {
        self.read_into_after(addr, dst, None)
    }

    /// [`Worker::read_into`] after only the launches numbered through `after` where it says
    /// ([`Worker::write_after`]).
    pub fn read_into_after(
        &mut self,
        addr: u64,
        dst: &GuestSpan,
        after: Option<u64>,
    ) -> Result<(), WorkerError> {
        self.usable()?;
        self.attach(dst)?;
        let req = Request::ReadInto {
            addr,
            memory: dst.memory_id(),
            offset: dst.offset() as u64,
            len: dst.len() as u64,
            after,
        };
        self.transfer(&req, dst.len())
    }

    /// One bulk copy of `len` bytes: its timeout grows with the size, at a rate far below any
    /// backend's (a copy in chunks gets `op_timeout` per 8 MiB chunk).
    fn transfer(&mut self, req: &Request<'_>, len: usize) -> Result<(), WorkerError> {
        const SLOWEST_BYTES_PER_SEC: u64 = 64 << 20;
        let extra = Duration::from_secs((len as u64).div_ceil(SLOWEST_BYTES_PER_SEC));
        match self.call(req, self.op_timeout.saturating_add(extra))? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected(req.name(), &other)),
        }
    }

    /// Makes sure the worker has mapped `span`'s memory: passes the memfd on the control socket,
    /// then asks the worker to map it. First detaches memories the host has dropped, so a worker
    /// serving a long lease does not keep every dead instance's memory alive.
    fn attach(&mut self, span: &GuestSpan) -> Result<(), WorkerError> {
        let dead: Vec<u64> = self
            .attached
            .iter()
            .filter(|(_, w)| w.strong_count() == 0)
            .map(|(&id, _)| id)
            .collect();
        for id in dead {
            self.attached.remove(&id);
            self.call_ok(&Request::DetachMemory { id })?;
        }
        let id = span.memory_id();
        if self.attached.contains_key(&id) {
            return Ok(());
        }
        self.usable()?;
        if let Err(e) =
            crate::contract::control_socket::send_fd(self.ctl.as_fd(), id, span.shared.fd.as_fd())
        {
            // Nothing was queued; but a socket that refuses a packet means a dead or wedged peer.
            let how = self
                .proc
                .poll()
                .map_or_else(String::new, |h| format!(" (worker process {h})"));
            return Err(self.lose(format!("cannot pass guest memory to the worker: {e}{how}")));
        }
        self.call_ok(&Request::AttachMemory {
            id,
            capacity: span.shared.capacity as u64,
        })?;
        self.attached.insert(id, Arc::downgrade(&span.shared));
        Ok(())
    }

    /// Guest memories this worker has mapped now (for tests and accounting).
    pub fn attached_memories(&self) -> usize {
        self.attached.len()
    }

    pub fn copy(&mut self, dst: u64, src: u64, len: u64) -> Result<(), WorkerError> {
        self.call_ok(&Request::Copy { dst, src, len })
    }

    /// Loads PTX. Launches name its kernels by their index in the answer's `kernels`.
    ///
    /// A load of exactly the text of a shareable module this worker holds (one without
    /// module-scope `.global` variables, [`crate::contract::modules`]) is answered here with that
    /// module's id, as the worker would answer it (see [`Worker::load_again`]).
    pub fn load_module(&mut self, ptx: &str) -> Result<LoadedModule, WorkerError> {
        if let Some(again) = self.load_again(ptx)? {
            return Ok(again);
        }
        self.room_for_a_module(ptx.len())?;
        match self.call(&Request::LoadModule { ptx }, self.op_timeout)? {
            Response::Module(module) => Ok(self.loaded(Some(ptx), ptx.len(), module)),
            other => Err(self.unexpected("load-module", &other)),
        }
    }

    /// The module a load of `ptx` gets, answered without asking the worker where it holds a
    /// shareable load of exactly this text and nothing was posted since its last answer (so no
    /// failure is held for this call to report); `None` where the worker must be asked. Refused
    /// as a load would be: beside a running persistent kernel, past the worker's module limit;
    /// a worker known lost or unusable is asked (and so reports it). A worker that died since its
    /// last answer is not looked for here (that is a system call per load): the
    /// next op that asks it reports it.
    pub fn load_again(&mut self, ptx: &str) -> Result<Option<LoadedModule>, WorkerError> {
        self.no_load_beside_persistent()?;
        if !self.nothing_posted || self.usable().is_err() {
            return Ok(None);
        }
        // A repeated load of a shared module takes an id, and no more text.
        self.room_for_a_module(0)?;
        Ok(self.aliases.load_again(ptx))
    }

    /// Every load holds one of the worker's [`MAX_MODULES`] module ids, those answered by the
    /// host included; a load the worker makes of `text_len` bytes of text holds that much of
    /// its [`MAX_MODULE_TEXT_BYTES`].
    fn room_for_a_module(&self, text_len: usize) -> Result<(), WorkerError> {
        if self.kernel_names.len() + self.deferred_unloads.len() + self.aliases.extra()
            >= MAX_MODULES
        {
            return Err(WorkerError::op(
                ErrorKind::OutOfMemory,
                format!("a worker holds at most {MAX_MODULES} modules; unload one first"),
            ));
        }
        if self.module_text_bytes.saturating_add(text_len) > MAX_MODULE_TEXT_BYTES {
            return Err(WorkerError::op(
                ErrorKind::OutOfMemory,
                format!(
                    "a worker holds modules made of at most {} MiB of text; this lease's hold {:.1} MiB and this one \
                     is {:.1} MiB: unload modules no longer needed first",
                    MAX_MODULE_TEXT_BYTES >> 20,
                    self.module_text_bytes as f64 / (1 << 20) as f64,
                    text_len as f64 / (1 << 20) as f64
                ),
            ));
        }
        Ok(())
    }

    pub fn load_source(
        &mut self,
        source: &str,
        options: &[String],
    ) -> Result<LoadedModule, WorkerError> {
        self.no_load_beside_persistent()?;
        let options = options.iter().map(String::as_str).collect();
        self.room_for_a_module(source.len())?;
        match self.call(&Request::LoadSource { source, options }, self.op_timeout)? {
            // The module's text is the PTX NVRTC made, as the worker counts it.
            Response::Module(module) => Ok(self.loaded(None, source.len(), module)),
            other => Err(self.unexpected("load-source", &other)),
        }
    }

    /// Loads PTX through the host's module cache (`Request::LoadModuleCached`): `image`, unless
    /// empty, is what an earlier load of exactly `ptx` compiled on a device like this worker's.
    /// Returns the module and what this load compiled, for the cache. An image too large to
    /// travel with the PTX is left behind (the worker compiles).
    pub fn load_module_cached(
        &mut self,
        ptx: &str,
        image: &[u8],
    ) -> Result<(LoadedModule, Compiled), WorkerError> {
        if let Some(again) = self.load_again(ptx)? {
            return Ok((again, Compiled::default()));
        }
        self.room_for_a_module(ptx.len())?;
        // Head and the two lengths: 32 bytes.
        let image = if ptx.len() + image.len() + 32 > self.chan.data_size() {
            &[][..]
        } else {
            image
        };
        match self.call(&Request::LoadModuleCached { ptx, image }, self.op_timeout)? {
            Response::CachedModule { module, compiled } => {
                Ok((self.loaded(Some(ptx), ptx.len(), module), compiled))
            }
            other => Err(self.unexpected("load-module-cached", &other)),
        }
    }

    /// Compiles CUDA C and loads it, answering with the PTX NVRTC produced (and on cuda the
    /// cubin made of it), for the host's module cache.
    pub fn load_source_cached(
        &mut self,
        source: &str,
        options: &[String],
    ) -> Result<(LoadedModule, Compiled), WorkerError> {
        self.no_load_beside_persistent()?;
        self.room_for_a_module(source.len())?;
        let options = options.iter().map(String::as_str).collect();
        match self.call(
            &Request::LoadSourceCached { source, options },
            self.op_timeout,
        )? {
            Response::CachedModule { module, compiled } => {
                Ok((self.loaded(None, source.len(), module), compiled))
            }
            other => Err(self.unexpected("load-source-cached", &other)),
        }
    }

    /// Notes a loaded module's kernel names, for messages about its launches, the `text_len`
    /// bytes of text it holds (at least what the worker says it loaded), and, loaded from the
    /// PTX `ptx`, its text for repeated loads.
    fn loaded(&mut self, ptx: Option<&str>, text_len: usize, m: LoadedModule) -> LoadedModule {
        let text_len = text_len.max(usize::try_from(m.text_bytes).unwrap_or(usize::MAX));
        self.kernel_names.insert(m.id, Arc::clone(&m.kernels));
        if let Some(old) = self.module_text.insert(m.id, text_len) {
            self.module_text_bytes = self.module_text_bytes.saturating_sub(old);
        }
        // Saturating: the worker's figure is not trusted to be small.
        self.module_text_bytes = self.module_text_bytes.saturating_add(text_len);
        if let Some(ptx) = ptx {
            self.aliases.loaded(ptx, &m);
        }
        m
    }

    /// Unloads a module. While a persistent kernel runs, the module is only forgotten here and
    /// unloaded once none runs (at the next load or unload, or with the worker's reset): a GPU's
    /// driver waits for every running kernel to unload code, and a persistent kernel may run for
    /// as long as its lease.
    ///
    /// A module other loads still hold (see [`Worker::load_module`]) stays loaded: only its last
    /// unload goes to the worker.
    pub fn unload_module(&mut self, id: u32) -> Result<(), WorkerError> {
        if !self.aliases.unload(id) {
            return Ok(());
        }
        if self.persistent_running() > 0 {
            self.kernel_names.remove(&id);
            self.deferred_unloads.push(id);
            return Ok(());
        }
        self.unload_deferred()?;
        // Its kernels keep their names until it is gone: a wait cut short names them.
        self.call_ok(&Request::UnloadModule { id })?;
        self.kernel_names.remove(&id);
        self.text_unloaded(id);
        Ok(())
    }

    /// Unloads the modules [`Worker::unload_module`] put off, once no persistent kernel runs.
    fn unload_deferred(&mut self) -> Result<(), WorkerError> {
        // Each taken off the list only once the worker has unloaded it: one answered with an
        // earlier failure (held for the next call) is still loaded, and stays listed.
        while let Some(&id) = self.deferred_unloads.last() {
            self.call_ok(&Request::UnloadModule { id })?;
            self.deferred_unloads.pop();
            self.text_unloaded(id);
        }
        Ok(())
    }

    /// The worker no longer holds module `id`'s text.
    fn text_unloaded(&mut self, id: u32) {
        if let Some(len) = self.module_text.remove(&id) {
            self.module_text_bytes = self.module_text_bytes.saturating_sub(len);
        }
    }

    /// A module cannot be loaded while a persistent kernel runs on the worker: a GPU's driver
    /// loads code only once every running kernel of the context has ended (measured on an H200:
    /// `cuModuleLoadData` beside a running kernel returns when that kernel does, eager or lazy
    /// loading alike), so the load would wait as long as the kernel runs. Refused at once, on
    /// every backend alike, so a tasklet behaves the same on the emulator.
    fn no_load_beside_persistent(&mut self) -> Result<(), WorkerError> {
        if self.persistent_running() == 0 {
            return self.unload_deferred();
        }
        Err(WorkerError::op(
            ErrorKind::LoadFailed,
            "a module cannot be loaded while a persistent kernel runs on this lease: the GPU's driver loads code only \
             once every running kernel has ended; load every module the lease needs before launching its persistent \
             kernel, or stop that kernel first",
        ))
    }

    /// Launches a kernel: posted, like a CUDA launch.
    ///
    /// The request is appended to the channel's ring and this returns without waiting for the
    /// worker (only, when the ring is full, for room in it). The worker serves requests in order.
    /// If the launch fails, the worker keeps the error and drops later launches; the next op that
    /// waits for an answer (every op but `launch`: `sync`, `read`, `alloc`, `info`, `ping` …) is
    /// then not performed and returns the launch's error instead, its message naming the launch
    /// by its ordinal and its kernel: "launch #3 of kernel `k` failed: …" (launches count from 1
    /// since the worker started or was reset, those dropped included; `free` and `reset` are
    /// performed regardless; `free` leaves the error to the op after it, `reset` drops it with
    /// the rest of the lease's state). A fault found later on the device is named the same way.
    /// A fault or a missed deadline poisons the worker as always; a worker that dies is `Lost`.
    ///
    /// On the emulator the worker runs each kernel before taking the next request (or to its
    /// step limit, which stands in for the deadline); on CUDA it queues the kernel, and the
    /// kernel's fault or missed deadline is reported by `sync` or by the next op that waits for
    /// it (`sync`, the transfers, `alloc`, `free`, `copy`, `reset`; a module load or unload may
    /// be answered from the worker's module cache without waiting). Either way the host keeps a
    /// bound on how long the queued kernels may legitimately take — each its whole deadline (on
    /// the emulator, whose step limit only approximates it, plus 100 ms for the emulator to
    /// report it) from when the one before it could have ended — and every op may take that much
    /// longer than `op_timeout`. An op with no answer by then is `DeadlineExceeded` while kernels
    /// are queued (a kernel ran past its deadline unreported) and the worker is killed; with
    /// nothing queued it is `Lost`.
    pub fn launch(&mut self, l: &Launch<'_>) -> Result<(), WorkerError> {
        // The one check of a launch here: the host's own timers need a deadline. Everything else
        // about a launch is the worker's to check, against the module and the device.
        if l.deadline.is_zero() {
            return Err(WorkerError::op(
                ErrorKind::InvalidArgument,
                "a launch needs a deadline above zero",
            ));
        }
        self.usable()?;
        self.encode(&Request::Launch(l.clone()));
        self.post_frame("launch")?;
        // The clock is read after posting (a kernel starts no earlier than that anyway), not on the
        // way to the worker.
        let now = Instant::now();
        let from = self.pending_until.map_or(now, |p| p.max(now));
        self.busy_since.get_or_insert(now);
        self.pending_until = Some(later(from, self.launch_bound(l.deadline)));
        self.last_launch = (l.module, l.kernel);
        self.launches += 1;
        Ok(())
    }

    /// Records `ops` as a graph in the worker (on cuda, built and instantiated once); its id.
    pub fn graph_create(&mut self, ops: &[GraphOp<'_>]) -> Result<u32, WorkerError> {
        let req = Request::GraphCreate { ops: ops.to_vec() };
        match self.call(&req, self.op_timeout)? {
            Response::Graph { id } => Ok(id),
            other => Err(self.unexpected("graph-create", &other)),
        }
    }

    /// Replaces the argument block of launch `node` of `graph` for its next replays.
    pub fn graph_set_args(
        &mut self,
        graph: u32,
        node: u32,
        args: &[u8],
    ) -> Result<(), WorkerError> {
        self.call_ok(&Request::GraphSetArgs { graph, node, args })
    }

    /// Writes `writes` (16-byte records: a device address, 8 bytes of value), then replays
    /// `graph` `times` times. `deadlines` is the sum of the graph's launch deadlines: each replay
    /// may keep the worker busy that long. On the emulator the answer comes once the replays
    /// ran (the call may take them all); on cuda once they are queued, and later calls may wait
    /// behind them as behind launches.
    pub fn graph_replay(
        &mut self,
        graph: u32,
        times: u32,
        writes: &[u8],
        deadlines: Duration,
    ) -> Result<(), WorkerError> {
        let bound = self.launch_bound(deadlines).saturating_mul(times.max(1));
        let req = Request::GraphReplay {
            graph,
            times,
            writes,
        };
        let r = match self.call(&req, self.op_timeout.saturating_add(bound))? {
            Response::Ok => Ok(()),
            other => Err(self.unexpected("graph-replay", &other)),
        };
        if r.is_ok() && !self.drains(&req) {
            let now = Instant::now();
            let from = self.pending_until.map_or(now, |p| p.max(now));
            self.pending_until = Some(later(from, bound));
        }
        r
    }

    /// Makes `span` (of mapped memory the host shares with kernels: rings, control blocks) visible
    /// to kernels, attaching its memory first if need be; the device address of its start.
    pub fn map_device(&mut self, span: &GuestSpan) -> Result<u64, WorkerError> {
        self.attach(span)?;
        let req = Request::MapDevice {
            memory: span.memory_id(),
            offset: span.offset() as u64,
            len: span.len() as u64,
        };
        match self.call(&req, self.op_timeout)? {
            Response::Allocated { addr } => Ok(addr),
            other => Err(self.unexpected("map-device", &other)),
        }
    }

    /// Undoes the [`Worker::map_device`] that answered `addr`.
    pub fn unmap_device(&mut self, addr: u64) -> Result<(), WorkerError> {
        self.call_ok(&Request::UnmapDevice { addr })
    }

    /// Starts `l` as a persistent kernel whose control block is the `CONTROL_BYTES` at
    /// `control` of `area` (mapped for kernels already, by [`Worker::map_device`]): answered once
    /// it is started. It runs beside the worker's other work, exempt from `l.deadline`, and is
    /// not waited for by `sync`; its end shows in the control block (and, where the kernel
    /// cannot write it, in its status block: [`Worker::persistent_view`]). The worker keeps the
    /// area until the kernel is seen ended ([`Worker::stop_persistent`]).
    pub fn launch_persistent(
        &mut self,
        l: &Launch<'_>,
        area: &Arc<MappedArea>,
        control: usize,
    ) -> Result<(), WorkerError> {
        let invalid = |what: &str| WorkerError::op(ErrorKind::InvalidArgument, what.to_string());
        let span = area
            .span(control, CONTROL_BYTES)
            .ok_or_else(|| invalid("a control block outside its area"))?;
        let status_area = match &self.status_area {
            Some(a) => Arc::clone(a),
            None => {
                let a = MappedArea::create(STATUS_AREA_BYTES).map_err(|e| {
                    WorkerError::op(
                        ErrorKind::OutOfMemory,
                        format!("cannot make memory for persistent kernels' status: {e}"),
                    )
                })?;
                Arc::clone(self.status_area.insert(Arc::new(a)))
            }
        };
        let status = Piece::take(&status_area, CONTROL_BYTES).ok_or_else(|| {
            invalid("no room for another persistent kernel's status on this worker")
        })?;
        let status_span = status_area
            .span(status.offset(), CONTROL_BYTES)
            .ok_or_else(|| invalid("a status block outside its area"))?;
        let r = self
            .attach(&span)
            .and_then(|()| self.attach(&status_span))
            .and_then(|()| {
                self.call_ok(&Request::LaunchPersistent {
                    launch: l.clone(),
                    memory: span.memory_id(),
                    control: control as u64,
                    status_memory: status_span.memory_id(),
                    status: status.offset() as u64,
                })
            });
        r?;
        // A control block given back and taken again names the new kernel only: forget those
        // seen ended, or the view of an earlier kernel at the same block would be found first.
        self.persistent.retain(|p| !view_of(p).ended());
        self.persistent.push(Persistent {
            area: Arc::clone(area),
            control,
            status: Arc::new(status),
        });
        Ok(())
    }

    /// The host's view of the persistent kernel this worker started with its control block at
    /// `control` of `area`: what the kernel counts from its control block, whether and how it
    /// ended from its status block. `None` once it is seen ended and forgotten, or if no such
    /// kernel was started here.
    pub fn persistent_view(&self, area: &Arc<MappedArea>, control: usize) -> Option<ActorView> {
        let p = self
            .persistent
            .iter()
            .find(|p| Arc::ptr_eq(&p.area, area) && p.control == control)?;
        Some(ActorView::new(
            Arc::clone(&p.area),
            p.control,
            Arc::clone(&p.status),
        ))
    }

    /// Persistent kernels started on this worker and not seen ended.
    pub fn persistent_running(&mut self) -> usize {
        let seen = self.persistent.len();
        self.persistent.retain(|p| !view_of(p).ended());
        if self.persistent.len() < seen {
            // One ended, perhaps faulting: only the worker's answer to the next sync (or load)
            // says so.
            self.settled = false;
            self.nothing_posted = false;
        }
        self.persistent.len()
    }

    /// Asks every persistent kernel still running to return (through its control block) and
    /// waits up to `grace` for all of them to have ended; whether they all did. One that did not
    /// keeps running: the worker is then not to be reused (its reset is refused), only ended.
    pub fn stop_persistent(&mut self, grace: Duration) -> bool {
        if self.persistent_running() == 0 {
            return true;
        }
        for p in &self.persistent {
            view_of(p).ask_to_terminate();
        }
        let until = Instant::now() + grace;
        let mut pause = Duration::from_micros(50);
        loop {
            if self.persistent_running() == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= until || self.is_lost() {
                return false;
            }
            std::thread::sleep(pause.min(until - now));
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    pub fn graph_destroy(&mut self, graph: u32) -> Result<(), WorkerError> {
        self.call_ok(&Request::GraphDestroy { graph })
    }

    /// Waits for every launched kernel; reports the first fault or missed deadline.
    ///
    /// On a device that can signal (cuda), success may be seen in the channel's completion word,
    /// stored by the device itself once the kernels finished, before the worker's answer (see
    /// [`crate::contract::channel`]); a failure always comes as the worker's answer.
    pub fn sync(&mut self) -> Result<(), WorkerError> {
        // Right after a sync or a whole-queue read nothing is left to wait for, and any fault
        // was reported by that answer. The worker is still looked at, so one that died
        // meanwhile is reported as it would be by its own answer: through its life lock, with
        // no system call, where it holds one. A persistent kernel not seen ended may fault at
        // any time, which only the worker's answer reports.
        if self.settled
            && self.persistent.is_empty()
            && self.usable().is_ok()
            && self.still_serving()
        {
            return Ok(());
        }
        match self.call_answered(&Request::Sync, self.op_timeout, true)? {
            (_, Answer::Signalled) => {
                self.signalled_syncs += 1;
                Ok(())
            }
            (Response::Ok, Answer::Response) => Ok(()),
            (other, Answer::Response) => Err(self.unexpected("sync", &other)),
        }
    }

    /// How many `sync`s so far were answered through the completion word.
    pub fn signalled_syncs(&self) -> u64 {
        self.signalled_syncs
    }

    /// Frees every allocation, unloads every module and detaches every guest memory (the pool
    /// does this on release).
    pub fn reset(&mut self) -> Result<(), WorkerError> {
        let r = self.call_ok(&Request::Reset);
        // Whatever the answer: the worker drops its attachments before resetting its backend, and
        // a lost worker has none. A memory used again is attached again. Its modules are gone
        // either way (unloaded, or with the worker).
        self.attached.clear();
        self.kernel_names.clear();
        self.aliases.clear();
        // Unloaded by the reset with every other module of the lease.
        self.deferred_unloads.clear();
        self.module_text.clear();
        self.module_text_bytes = 0;
        self.forget_marks();
        self.launches = 0;
        r
    }
}

/// The host's view of a persistent kernel's blocks.
fn view_of(p: &Persistent) -> ControlBlock {
    *ActorView::new(Arc::clone(&p.area), p.control, Arc::clone(&p.status)).block()
}

fn offset(addr: u64, by: usize) -> Result<u64, WorkerError> {
    addr.checked_add(by as u64).ok_or_else(|| {
        WorkerError::op(
            ErrorKind::OutOfBounds,
            format!("{addr:#x}+{by} overflows the address space"),
        )
    })
}
