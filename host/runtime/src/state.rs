//! What a tasklet's store holds: WASI, the resource table, GPU state and the memory limiter.

use crate::config::Grant;
use crate::gpu::GpuService;
use crate::guest_output::GuestOutput;
use crate::limits::MemoryLimit;
use crate::sleep::RunBounds;
use crate::wit::{GpuState, GpuView};
use wasmtime::component::ResourceTable;
use wasmtime_wasi::clocks::WasiClocksCtxView;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub struct TaskletState {
    wasi: WasiCtx,
    table: ResourceTable,
    gpu: Box<dyn GpuService>,
    pub(crate) limits: MemoryLimit,
    bounds: RunBounds,
}

impl TaskletState {
    pub(crate) fn new(
        grant: Grant,
        gpu: Box<dyn GpuService>,
        output: &GuestOutput,
        bounds: RunBounds,
    ) -> TaskletState {
        // A tasklet's output is its return value; what it prints is diagnostics, so both of its
        // streams go to the host's stderr, or both into the run's capture. No files, no
        // sockets, no environment.
        let mut wasi = WasiCtxBuilder::new();
        match output {
            GuestOutput::Inherit => wasi.stdout(wasmtime_wasi::cli::stderr()).inherit_stderr(),
            GuestOutput::Capture(c) => wasi.stdout(c.clone()).stderr(c.clone()),
        };
        let wasi = wasi.build();
        let limits = MemoryLimit::new(grant.limits.memory);
        TaskletState {
            wasi,
            table: ResourceTable::new(),
            gpu,
            limits,
            bounds,
        }
    }

    /// The run's clocks and what bounds its sleeps (see `sleep`), borrowed together.
    pub(crate) fn bounded_clock(&mut self) -> (WasiClocksCtxView<'_>, &RunBounds) {
        let clocks = WasiClocksCtxView {
            ctx: self.wasi.clocks(),
            table: &mut self.table,
        };
        (clocks, &self.bounds)
    }
}

impl TaskletState {
    /// Tells the run's GPU service the run is over (see [`GpuService::end`]).
    pub(crate) fn end_gpu(&mut self) {
        self.gpu.end();
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
