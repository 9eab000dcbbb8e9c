//! What a tasklet's store holds: WASI, the resource table, GPU state and the memory limiter.

use crate::config::Grant;
use crate::gpu::GpuService;
use crate::wit::{GpuState, GpuView};
use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub struct TaskletState {
    wasi: WasiCtx,
    table: ResourceTable,
    gpu: Box<dyn GpuService>,
    pub(crate) limits: StoreLimits,
}

impl TaskletState {
    pub fn new(grant: Grant, gpu: Box<dyn GpuService>) -> TaskletState {
        // A tasklet's output is its return value; what it prints is diagnostics, so both of its
        // streams go to the host's stderr. No files, no sockets, no environment.
        let wasi = WasiCtxBuilder::new()
            .stdout(wasmtime_wasi::cli::stderr())
            .inherit_stderr()
            .build();
        let limits = StoreLimitsBuilder::new()
            .memory_size(usize::try_from(grant.limits.memory).unwrap_or(usize::MAX))
            .trap_on_grow_failure(true)
            .build();
        TaskletState {
            wasi,
            table: ResourceTable::new(),
            gpu,
            limits,
        }
    }
}

impl WasiView for TaskletState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl GpuView for TaskletState {
    fn gpu(&mut self) -> GpuState<'_> {
        GpuState {
            service: &mut *self.gpu,
            table: &mut self.table,
        }
    }
}
