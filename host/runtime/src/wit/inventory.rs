//! `tasklet:gpu/inventory`.

use super::bindings::tasklet::gpu::inventory::Host;
use super::bindings::tasklet::gpu::types::DeviceInfo;
use super::GpuState;

impl Host for GpuState<'_> {
    fn devices(&mut self) -> wasmtime::Result<Vec<DeviceInfo>> {
        Ok(self
            .service
            .devices()
            .into_iter()
            .map(|d| DeviceInfo {
                index: d.index,
                name: d.name,
                backend: d.backend,
                total_memory: d.total_memory,
                free_memory: d.free_memory,
                compute_capability: d.compute_capability,
            })
            .collect())
    }
}
