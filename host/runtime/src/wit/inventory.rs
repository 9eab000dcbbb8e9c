//! `tasklet:gpu/inventory`, in each contract version.

use super::GpuState;

/// `devices` of version `$v`, whose `device-info` has the fields `$more` (taken from the
/// service's device by the same name) beside those every version has.
macro_rules! inventory {
    ($v:ident $(, $more:ident)*) => {
        impl super::bindings::$v::tasklet::gpu::inventory::Host for GpuState<'_> {
            fn devices(
                &mut self,
            ) -> wasmtime::Result<Vec<super::bindings::$v::tasklet::gpu::types::DeviceInfo>> {
                Ok(self
                    .service
                    .devices()
                    .into_iter()
                    .map(|d| super::bindings::$v::tasklet::gpu::types::DeviceInfo {
                        index: d.index,
                        name: d.name,
                        backend: d.backend,
                        total_memory: d.total_memory,
                        free_memory: d.free_memory,
                        compute_capability: d.compute_capability,
                        $($more: d.$more,)*
                    })
                    .collect())
            }
        }
    };
}

inventory!(v01);
inventory!(v02, uuid, leases);
