//! `tasklet:gpu/sessions`: device memory, modules and launches, each checked against the tasklet's
//! rights, the lease's quota, and the ownership of every handle before anything reaches a worker.

use super::error::{
    invalid, out_of_bounds, quota, unauthorized, unsupported, GpuFailure, GpuResult,
};
use super::{
    BufferHandle, GpuState, KernelEntry, LeaseHandle, ModuleHandle, ModuleState, SessionHandle,
    SessionState,
};
use crate::bindings::tasklet::gpu::sessions::{
    Host, HostBuffer, HostModule, HostSession, KernelArg, LaunchConfig,
};
use crate::bindings::tasklet::gpu::types::GpuError;
use crate::config::Right;
use crate::lease::Lease;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use tasklet_worker::guest_memory::{locate, GuestSpan};
use tasklet_worker::{charged_bytes, Launch, WorkerError, ALLOC_GRANULE, MAX_PARAM_BYTES};
use wasmtime::component::{Resource, ResourceTable, WasmList};
use wasmtime::StoreContextMut;

/// Transfers of at least this many bytes go between the device and linear memory directly (the
/// worker maps the guest's memory); smaller ones go through the worker's message area, which costs
/// less than a direct transfer's setup.
pub const DIRECT_MIN_BYTES: usize = 64 << 10;

impl Host for GpuState<'_> {}

fn trap(what: String) -> GpuFailure {
    GpuFailure::Trap(wasmtime::format_err!(what))
}

impl GpuState<'_> {
    fn need(&self, right: Right) -> GpuResult<()> {
        if self.ctx.grant.gpu.rights.contains(right) {
            return Ok(());
        }
        let name = right.name();
        Err(unauthorized(format!(
            "missing right `{name}`: add \"{name}\" to `rights` under [gpu] in the tasklet's manifest (the node policy must allow it too)"
        )))
    }

    /// The session's id and state (through which its lease), borrowed: no reference-count
    /// traffic on the paths every launch and sync take.
    fn session(&self, handle: &Resource<SessionHandle>) -> GpuResult<(u64, &SessionState)> {
        let id = self.table.get(handle)?.id;
        let state = self
            .ctx
            .sessions
            .get(&id)
            .ok_or_else(|| trap(format!("session {id} has no state")))?;
        Ok((id, state))
    }

    fn state(&mut self, session: u64) -> GpuResult<&mut SessionState> {
        self.ctx
            .sessions
            .get_mut(&session)
            .ok_or_else(|| trap(format!("session {session} has no state")))
    }

    fn run<T>(
        &self,
        lease: &Lease,
        op: impl FnOnce(crate::lease::LeaseAccess<'_>) -> Result<T, WorkerError>,
    ) -> GpuResult<T> {
        Ok(self.ctx.manager.with_worker(lease, op)?)
    }

    /// The checks every transfer between the guest and a buffer passes, whichever way its bytes
    /// travel: the right, the session (and through it the lease), the buffer's owner, and the span
    /// within the buffer. Returns the span's device address and the lease to run it under; the
    /// lease's liveness is checked when it runs.
    fn transfer(
        &self,
        right: Right,
        this: &Resource<SessionHandle>,
        buf: &Resource<BufferHandle>,
        offset: u64,
        len: u64,
    ) -> GpuResult<(u64, &Lease)> {
        self.need(right)?;
        let (session, state) = self.session(this)?;
        let (addr, size) = buffer_in(self.table, session, state, buf)?;
        Ok((span(addr, size, offset, len)?, &state.lease))
    }
}

/// The device address and size of a buffer, if it belongs to `session` (whose state this is).
fn buffer_in(
    table: &ResourceTable,
    session: u64,
    state: &SessionState,
    handle: &Resource<BufferHandle>,
) -> GpuResult<(u64, u64)> {
    let b = table.get(handle)?;
    if b.session != session {
        return Err(invalid(format!(
            "buffer {} belongs to another session; a buffer is usable only in the session that allocated it",
            b.id
        )));
    }
    let &(addr, size) = state.buffers.get(&b.id).ok_or_else(|| {
        GpuError::LeaseExpired("the buffer's memory was freed when its lease ended".into())
    })?;
    Ok((addr, size))
}

/// `offset..offset+len` within a buffer of `size` bytes, as a device address.
fn span(addr: u64, size: u64, offset: u64, len: u64) -> GpuResult<u64> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(addr + offset),
        _ => Err(out_of_bounds(format!(
            "bytes {offset}..{} are outside the buffer's {size} bytes",
            offset as u128 + len as u128
        ))),
    }
}

impl HostSession for GpuState<'_> {
    fn open(&mut self, lease: Resource<LeaseHandle>) -> GpuResult<Resource<SessionHandle>> {
        let lease = self.lease(&lease)?;
        // Refuse sessions on ended leases now rather than at their first operation.
        self.ctx.manager.with_worker(&lease, |_| Ok(()))?;
        let id = self.ctx.fresh_id();
        self.ctx.sessions.insert(
            id,
            SessionState {
                lease,
                buffers: FxHashMap::default(),
                modules: FxHashMap::default(),
            },
        );
        Ok(self.table.push(SessionHandle { id })?)
    }

    fn mem_alloc(
        &mut self,
        this: Resource<SessionHandle>,
        bytes: u64,
    ) -> GpuResult<Resource<BufferHandle>> {
        self.need(Right::Alloc)?;
        let (session, state) = self.session(&this)?;
        let lease = &state.lease;
        if bytes == 0 {
            return Err(invalid("cannot allocate 0 bytes"));
        }
        // Charged in whole allocation units, as the worker counts them, so that many tiny
        // allocations cannot hold more of the device than the lease was granted.
        let charge = charged_bytes(bytes);
        let used = lease.used();
        if used.saturating_add(charge) > lease.granted {
            return Err(quota(format!(
                "allocating {bytes} bytes (charged {charge}: allocations count in units of {ALLOC_GRANULE}) would bring \
                 the lease to {} of its {} granted bytes; acquire a larger lease",
                used.saturating_add(charge),
                lease.granted
            )));
        }
        let addr = self.run(lease, |a| {
            let addr = a.worker.alloc(bytes)?;
            *a.used += charge;
            Ok(addr)
        })?;
        let id = self.ctx.fresh_id();
        self.state(session)?.buffers.insert(id, (addr, bytes));
        Ok(self.table.push(BufferHandle {
            id,
            session,
            size: bytes,
        })?)
    }

    fn mem_write(
        &mut self,
        this: Resource<SessionHandle>,
        dst: Resource<BufferHandle>,
        offset: u64,
        data: Vec<u8>,
    ) -> GpuResult<()> {
        // The copy path: the linker routes `mem-write` through `mem_write_list`, which comes here
        // for data it cannot hand to the worker in place.
        let (at, lease) = self.transfer(Right::Write, &this, &dst, offset, data.len() as u64)?;
        self.run(lease, |a| a.worker.write(at, &data))
    }

    fn mem_read_into(
        &mut self,
        this: Resource<SessionHandle>,
        src: Resource<BufferHandle>,
        offset: u64,
        dst: Vec<u8>,
    ) -> GpuResult<()> {
        // The linker routes `mem-read-into` through `mem_read_into_list`, which sees the guest's
        // list in place. Here the list arrived as a copy, and filling a copy reads nothing into
        // the guest: refuse, after the same checks, rather than succeed without effect.
        self.transfer(Right::Read, &this, &src, offset, dst.len() as u64)?;
        Err(unsupported(
            "mem-read-into needs the host to see the destination in place, and this host was linked without \
             that; use mem-read",
        ))
    }

    fn mem_read(
        &mut self,
        this: Resource<SessionHandle>,
        src: Resource<BufferHandle>,
        offset: u64,
        len: u64,
    ) -> GpuResult<Vec<u8>> {
        let (at, lease) = self.transfer(Right::Read, &this, &src, offset, len)?;
        // The result must fit in the guest's memory: refuse before the host allocates it.
        let limit = self.ctx.grant.limits.memory;
        if len > limit {
            return Err(out_of_bounds(format!(
                "a read of {len} bytes cannot fit in the tasklet's {limit}-byte memory limit; read in pieces"
            )));
        }
        let len =
            usize::try_from(len).map_err(|_| out_of_bounds("read too large for this host"))?;
        let mut out = vec![0u8; len];
        self.run(lease, |a| a.worker.read(at, &mut out))?;
        Ok(out)
    }

    fn mem_copy(
        &mut self,
        this: Resource<SessionHandle>,
        dst: Resource<BufferHandle>,
        dst_offset: u64,
        src: Resource<BufferHandle>,
        src_offset: u64,
        len: u64,
    ) -> GpuResult<()> {
        self.need(Right::Write)?;
        let (session, state) = self.session(&this)?;
        let (daddr, dsize) = buffer_in(self.table, session, state, &dst)?;
        let (saddr, ssize) = buffer_in(self.table, session, state, &src)?;
        let to = span(daddr, dsize, dst_offset, len)?;
        let from = span(saddr, ssize, src_offset, len)?;
        self.run(&state.lease, |a| a.worker.copy(to, from, len))
    }

    fn module_load(
        &mut self,
        this: Resource<SessionHandle>,
        ptx: String,
    ) -> GpuResult<Resource<ModuleHandle>> {
        self.need(Right::Load)?;
        let (session, state) = self.session(&this)?;
        let module = self.run(&state.lease, |a| a.worker.load_module(&ptx))?;
        self.add_module(session, module)
    }

    fn module_load_source(
        &mut self,
        this: Resource<SessionHandle>,
        source: String,
        options: Vec<String>,
    ) -> GpuResult<Resource<ModuleHandle>> {
        self.need(Right::Load)?;
        let (session, state) = self.session(&this)?;
        let module = self.run(&state.lease, |a| a.worker.load_source(&source, &options))?;
        self.add_module(session, module)
    }

    fn launch(
        &mut self,
        this: Resource<SessionHandle>,
        module: Resource<ModuleHandle>,
        kernel: String,
        config: LaunchConfig,
        args: Vec<KernelArg>,
    ) -> GpuResult<()> {
        self.need(Right::Launch)?;
        let (g, b) = (config.grid, config.block);
        if [g.0, g.1, g.2, b.0, b.1, b.2].contains(&0) {
            return Err(GpuError::LaunchFailed(
                "grid and block dimensions must all be at least 1".into(),
            )
            .into());
        }
        // The block is built in the context's buffer, taken out for the call (so the session's
        // state can be borrowed beside it) and put back after: no allocation per launch.
        let mut block = std::mem::take(&mut self.ctx.arg_block);
        let r = self.launch_with(&this, &module, &kernel, &config, &args, &mut block);
        self.ctx.arg_block = block;
        r
    }

    fn sync(&mut self, this: Resource<SessionHandle>) -> GpuResult<()> {
        let (_, state) = self.session(&this)?;
        self.run(&state.lease, |a| a.worker.sync())
    }

    fn drop(&mut self, this: Resource<SessionHandle>) -> wasmtime::Result<()> {
        let id = self.table.delete(this)?.id;
        if let Some(state) = self.ctx.sessions.remove(&id) {
            // Free what the session still holds; if its lease already ended, that is done.
            let _ = self.ctx.manager.with_worker(&state.lease, |a| {
                for (addr, size) in state.buffers.values() {
                    a.worker.free(*addr)?;
                    *a.used = a.used.saturating_sub(charged_bytes(*size));
                }
                for m in state.modules.values() {
                    a.worker.unload_module(m.id)?;
                }
                Ok(())
            });
        }
        Ok(())
    }
}

impl GpuState<'_> {
    /// [`HostSession::launch`] past the right and dimension checks, building the argument block
    /// in `block`.
    fn launch_with(
        &self,
        this: &Resource<SessionHandle>,
        module: &Resource<ModuleHandle>,
        kernel: &str,
        config: &LaunchConfig,
        args: &[KernelArg],
        block: &mut Vec<u8>,
    ) -> GpuResult<()> {
        let (session, state) = self.session(this)?;
        let m = self.table.get(module)?;
        if m.session != session {
            return Err(invalid(
                "the module belongs to another session; load it in this one",
            ));
        }
        let loaded = state.modules.get(&m.id).ok_or_else(|| {
            GpuError::LeaseExpired("the module was unloaded when its lease ended".into())
        })?;
        let Some(entry) = loaded.kernels.iter().find(|k| k.info.name == kernel) else {
            let names: Vec<&str> = loaded
                .kernels
                .iter()
                .map(|k| k.info.name.as_str())
                .collect();
            return Err(GpuError::LaunchFailed(format!(
                "no kernel named {kernel:?} in the module; it has: {}",
                names.join(", ")
            ))
            .into());
        };
        argument_block(self.table, session, state, entry, args, block)?;
        let (g, b) = (config.grid, config.block);
        let launch = Launch {
            module: loaded.id,
            kernel,
            grid: [g.0, g.1, g.2],
            block: [b.0, b.1, b.2],
            shared_mem_bytes: config.shared_mem_bytes,
            args: block,
            deadline: self.ctx.grant.kernel_deadline,
        };
        self.run(&state.lease, |a| a.worker.launch(&launch))
    }

    fn add_module(
        &mut self,
        session: u64,
        module: tasklet_worker::LoadedModule,
    ) -> GpuResult<Resource<ModuleHandle>> {
        let id = self.ctx.fresh_id();
        self.state(session)?
            .modules
            .insert(id, ModuleState::new(module));
        Ok(self.table.push(ModuleHandle { id, session })?)
    }
}

/// Builds a kernel's argument block from typed arguments into `block`. Buffer arguments become
/// device addresses of the caller's own allocations; every argument must match its parameter's
/// size.
fn argument_block(
    table: &ResourceTable,
    session: u64,
    state: &SessionState,
    kernel: &KernelEntry,
    args: &[KernelArg],
    block: &mut Vec<u8>,
) -> GpuResult<()> {
    let info = &kernel.info;
    if args.len() != info.params.len() {
        return Err(invalid(format!(
            "kernel {} takes {} argument(s), {} given",
            info.name,
            info.params.len(),
            args.len()
        )));
    }
    // The parameter list comes from the worker: its layout was worked out with checked
    // arithmetic and within CUDA's limit on a kernel's parameter space when the module was
    // loaded, so no module can make the host panic or allocate without bound here.
    let Some((offsets, total)) = &kernel.layout else {
        return Err(invalid(format!(
            "kernel {} declares more than {MAX_PARAM_BYTES} bytes of parameters",
            info.name
        )));
    };
    block.clear();
    block.resize(*total as usize, 0);
    for (i, ((arg, param), &at)) in args.iter().zip(&info.params).zip(offsets).enumerate() {
        let scalar;
        let bytes: &[u8] = match arg {
            KernelArg::Buffer(b) => {
                let (addr, size) = buffer_in(table, session, state, &b.buffer)?;
                if b.offset > size {
                    return Err(out_of_bounds(format!(
                        "argument {i}: offset {} is past the end of its {size}-byte buffer",
                        b.offset
                    )));
                }
                scalar = (addr + b.offset).to_le_bytes();
                &scalar
            }
            KernelArg::I32(v) => &v.to_le_bytes()[..],
            KernelArg::U32(v) => &v.to_le_bytes()[..],
            KernelArg::I64(v) => &v.to_le_bytes()[..],
            KernelArg::U64(v) => &v.to_le_bytes()[..],
            KernelArg::F32(v) => &v.to_le_bytes()[..],
            KernelArg::F64(v) => &v.to_le_bytes()[..],
            KernelArg::Bytes(v) => v,
        };
        if bytes.len() != param.size as usize {
            return Err(invalid(format!(
                "argument {i} ({}) of kernel {} is {} bytes, the parameter takes {}",
                param.name,
                info.name,
                bytes.len(),
                param.size
            )));
        }
        let at = at as usize;
        block
            .get_mut(at..at + bytes.len())
            .ok_or_else(|| {
                invalid(format!(
                    "argument {i} falls outside kernel {}'s parameter space",
                    info.name
                ))
            })?
            .copy_from_slice(bytes);
    }
    Ok(())
}

impl HostBuffer for GpuState<'_> {
    fn size(&mut self, this: Resource<BufferHandle>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.size)
    }

    fn drop(&mut self, this: Resource<BufferHandle>) -> wasmtime::Result<()> {
        let b = self.table.delete(this)?;
        let Some(state) = self.ctx.sessions.get_mut(&b.session) else {
            return Ok(());
        };
        if let Some((addr, size)) = state.buffers.remove(&b.id) {
            let lease = Arc::clone(&state.lease);
            let _ = self.ctx.manager.with_worker(&lease, |a| {
                a.worker.free(addr)?;
                *a.used = a.used.saturating_sub(charged_bytes(size));
                Ok(())
            });
        }
        Ok(())
    }
}

impl HostModule for GpuState<'_> {
    fn kernels(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<Vec<String>> {
        let m = self.table.get(&this)?;
        let names = self
            .ctx
            .sessions
            .get(&m.session)
            .and_then(|s| s.modules.get(&m.id))
            .map(|loaded| loaded.kernels.iter().map(|k| k.info.name.clone()).collect())
            .unwrap_or_default();
        Ok(names)
    }

    fn drop(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<()> {
        let m = self.table.delete(this)?;
        let Some(state) = self.ctx.sessions.get_mut(&m.session) else {
            return Ok(());
        };
        if let Some(loaded) = state.modules.remove(&m.id) {
            let lease = Arc::clone(&state.lease);
            let _ = self
                .ctx
                .manager
                .with_worker(&lease, |a| a.worker.unload_module(loaded.id));
        }
        Ok(())
    }
}

/// `mem-write` with its data seen in place in guest memory (a `WasmList`, not a lifted copy):
/// a large span of a shared linear memory goes to the device in one copy by the worker, anything
/// else through [`HostSession::mem_write`]. Same checks either way.
pub(crate) fn mem_write_list<T>(
    mut store: StoreContextMut<'_, T>,
    get: fn(&mut T) -> GpuState<'_>,
    this: Resource<SessionHandle>,
    dst: Resource<BufferHandle>,
    offset: u64,
    data: WasmList<u8>,
) -> GpuResult<()> {
    let bytes = data.as_le_slice(&store);
    let direct = if bytes.len() >= DIRECT_MIN_BYTES {
        locate(bytes.as_ptr(), bytes.len())
    } else {
        None
    };
    let Some(span) = direct else {
        let copy = bytes.to_vec();
        return get(store.data_mut()).mem_write(this, dst, offset, copy);
    };
    // No reference into guest memory is held from here on: the worker reads it through its own
    // mapping, and returns only when it has.
    let gpu = get(store.data_mut());
    let (at, lease) = gpu.transfer(Right::Write, &this, &dst, offset, span.len() as u64)?;
    gpu.run(lease, |a| a.worker.write_from(at, &span))?;
    gpu.ctx.manager.count_direct(span.len(), 0);
    Ok(())
}

/// `mem-read-into`: fills the guest's list in place. A large span goes from the device into
/// linear memory in one copy by the worker; a small one through the worker's message area into a
/// host buffer, then into linear memory. The checks are `mem-read`'s.
pub(crate) fn mem_read_into_list<T>(
    mut store: StoreContextMut<'_, T>,
    get: fn(&mut T) -> GpuState<'_>,
    this: Resource<SessionHandle>,
    src: Resource<BufferHandle>,
    offset: u64,
    dst: WasmList<u8>,
) -> GpuResult<()> {
    let bytes = dst.as_le_slice(&store);
    let (addr, len) = (bytes.as_ptr(), bytes.len());
    let span: Option<GuestSpan> = locate(addr, len);
    // `bytes` is dead from here: the guest's bytes are written below, never through it.
    let gpu = get(store.data_mut());
    let (at, lease) = gpu.transfer(Right::Read, &this, &src, offset, len as u64)?;
    let Some(span) = span else {
        // Only reachable with a memory this host did not create (see guest_memory).
        return Err(unsupported(
            "the destination is not in memory the GPU worker can reach, so it cannot be filled in place; use mem-read",
        ));
    };
    if len >= DIRECT_MIN_BYTES {
        gpu.run(lease, |a| a.worker.read_into(at, &span))?;
        gpu.ctx.manager.count_direct(0, len);
        return Ok(());
    }
    let mut staged = vec![0u8; len];
    gpu.run(lease, |a| a.worker.read(at, &mut staged))?;
    // SAFETY: we are in a host call of the store that owns the memory, so no guest code runs, and
    // no reference into that memory is live (`bytes` is dead; `gpu` borrows only store data).
    if !unsafe { crate::guest_memory::copy_into_guest(addr as usize, &staged) } {
        return Err(trap(format!(
            "guest memory at {addr:p} (+{len}) vanished during mem-read-into"
        )));
    }
    Ok(())
}
