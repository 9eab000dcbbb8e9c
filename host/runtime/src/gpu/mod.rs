//! `tasklet:gpu` on the host: one module per interface, all reaching the tasklet's [`GpuCtx`]
//! through [`GpuView`].
//!
//! Ownership is checked by unique ids, never by table index (indices are reused): a buffer or module
//! is usable only in the session that made it, a session only while its lease lives.

pub mod error;
mod inventory;
mod leases;
pub(crate) mod sessions;

pub use error::{GpuFailure, GpuResult};
pub use sessions::DIRECT_MIN_BYTES;

use crate::config::Grant;
use crate::lease::{EndReason, Lease, LeaseManager};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use tasklet_worker::{KernelInfo, LoadedModule, MAX_PARAM_BYTES};
use wasmtime::component::{HasData, ResourceTable};

/// A tasklet's GPU state: its grant, its leases, and the sessions under them. Maps are keyed by
/// the host's own sequential ids, so they use a fast non-keyed hash (no key comes from a guest).
pub struct GpuCtx {
    grant: Grant,
    manager: Arc<LeaseManager>,
    leases: FxHashMap<u64, Arc<Lease>>,
    sessions: FxHashMap<u64, SessionState>,
    next_id: u64,
    /// Where each launch's argument block is built (kept: no allocation per launch).
    arg_block: Vec<u8>,
}

/// What the host remembers of a session, keyed by its unique id.
struct SessionState {
    lease: Arc<Lease>,
    /// Buffer id → (device address, size).
    buffers: FxHashMap<u64, (u64, u64)>,
    /// Module id → the worker's module and its kernels.
    modules: FxHashMap<u64, ModuleState>,
}

/// A loaded module as launches need it: the worker's id and each kernel's argument layout,
/// worked out once at load rather than at every launch.
struct ModuleState {
    id: u32,
    kernels: Vec<KernelEntry>,
}

struct KernelEntry {
    info: KernelInfo,
    /// Each parameter's offset in the argument block and the block's size; `None` when the
    /// parameters do not fit CUDA's parameter space (such a kernel cannot be launched).
    layout: Option<(Vec<u32>, u32)>,
}

impl ModuleState {
    fn new(module: LoadedModule) -> ModuleState {
        let kernels = module
            .kernels
            .into_iter()
            .map(|info| KernelEntry {
                layout: info.checked_param_layout(MAX_PARAM_BYTES),
                info,
            })
            .collect();
        ModuleState {
            id: module.id,
            kernels,
        }
    }
}

/// The guest's handle types as stored in the resource table.
pub struct LeaseHandle {
    id: u64,
}
pub struct SessionHandle {
    id: u64,
}
pub struct BufferHandle {
    id: u64,
    session: u64,
    size: u64,
}
pub struct ModuleHandle {
    id: u64,
    session: u64,
}

impl GpuCtx {
    pub fn new(grant: Grant, manager: Arc<LeaseManager>) -> GpuCtx {
        GpuCtx {
            grant,
            manager,
            leases: FxHashMap::default(),
            sessions: FxHashMap::default(),
            next_id: 1,
            arg_block: Vec::new(),
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

impl Drop for GpuCtx {
    /// However the tasklet ended (returned, trapped, ran out of time), everything it leased goes back.
    fn drop(&mut self) {
        for lease in self.leases.values() {
            self.manager.end(lease, EndReason::TaskletEnded);
        }
    }
}

/// Reaches the GPU state and the resource table from a store's data.
pub trait GpuView: Send {
    fn gpu(&mut self) -> GpuState<'_>;
}

/// The borrowed halves the host functions work on.
pub struct GpuState<'a> {
    pub ctx: &'a mut GpuCtx,
    pub table: &'a mut ResourceTable,
}

/// `HasData` marker for the generated `add_to_linker`.
pub struct Gpu;

impl HasData for Gpu {
    type Data<'a> = GpuState<'a>;
}

/// Adds `tasklet:gpu` to a linker whose store data implements [`GpuView`].
pub fn add_to_linker<T: GpuView + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
) -> wasmtime::Result<()> {
    use crate::bindings::tasklet::gpu;
    fn get<T: GpuView>(t: &mut T) -> GpuState<'_> {
        t.gpu()
    }
    gpu::types::add_to_linker::<T, Gpu>(linker, get)?;
    gpu::inventory::add_to_linker::<T, Gpu>(linker, get)?;
    gpu::leases::add_to_linker::<T, Gpu>(linker, get)?;
    gpu::sessions::add_to_linker::<T, Gpu>(linker, get)?;
    // mem-write and mem-read-into see their lists in place in guest memory (see there why).
    crate::bindings::add_list_views_to_linker(linker, get::<T>)?;
    Ok(())
}

impl crate::bindings::tasklet::gpu::types::Host for GpuState<'_> {
    fn convert_gpu_error(
        &mut self,
        err: GpuFailure,
    ) -> wasmtime::Result<crate::bindings::tasklet::gpu::types::GpuError> {
        match err {
            GpuFailure::Gpu(e) => Ok(e),
            GpuFailure::Trap(t) => Err(t),
        }
    }
}
