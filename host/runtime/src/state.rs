//! What a tasklet's store holds: WASI, the resource table, GPU state and the memory limiter.

use crate::config::Grant;
use crate::gpu::{GpuCtx, GpuState, GpuView};
use crate::lease::LeaseManager;
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime::{StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub struct TaskletState {
    wasi: WasiCtx,
    table: ResourceTable,
    gpu: GpuCtx,
    pub(crate) limits: StoreLimits,
}

impl TaskletState {
    pub fn new(grant: Grant, manager: Arc<LeaseManager>) -> TaskletState {
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
            gpu: GpuCtx::new(grant, manager),
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
            ctx: &mut self.gpu,
            table: &mut self.table,
        }
    }
}
