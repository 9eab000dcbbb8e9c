//! `tasklet:gpu/inventory`.

use super::GpuState;
use crate::bindings::tasklet::gpu::inventory::Host;
use crate::bindings::tasklet::gpu::types::DeviceInfo;

impl Host for GpuState<'_> {
    fn devices(&mut self) -> wasmtime::Result<Vec<DeviceInfo>> {
        if self.ctx.grant.gpu.max_leases == 0 {
            return Ok(Vec::new());
        }
        let mgr = &self.ctx.manager;
        let d = mgr.device();
        Ok(vec![DeviceInfo {
            index: d.index,
            name: d.name.clone(),
            backend: d.backend.to_string(),
            total_memory: d.total_memory,
            free_memory: mgr.free_memory(),
            compute_capability: d.compute_capability,
        }])
    }
}
