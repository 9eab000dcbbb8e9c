//! `tasklet:gpu/leases`: lease handles over the service's leases, in each contract version.

use super::{GpuResult, GpuState, LeaseHandle};
use crate::gpu;
use wasmtime::component::Resource;

/// The lease methods of version `$v`, with `$more` (methods that version adds) in its `HostLease`.
macro_rules! leases {
    ($v:ident) => {
        leases!($v => {});
    };
    ($v:ident => { $($more:tt)* }) => {
        const _: () = {
            use super::bindings::$v::tasklet::gpu::leases::{
                Host, HostLease, LeaseInfo, LeaseRequest,
            };

            impl Host for GpuState<'_> {}

            impl HostLease for GpuState<'_> {
                fn acquire(&mut self, request: LeaseRequest) -> GpuResult<Resource<LeaseHandle>> {
                    let id = self.service.lease_acquire(gpu::LeaseRequest {
                        min_vram: request.min_vram,
                        secs: request.secs,
                        device: request.device,
                    })?;
                    Ok(self.table.push(LeaseHandle { id })?)
                }

                fn renew(&mut self, this: Resource<LeaseHandle>, secs: u32) -> GpuResult<()> {
                    let id = self.table.get(&this)?.id;
                    Ok(self.service.lease_renew(id, secs)?)
                }

                fn info(&mut self, this: Resource<LeaseHandle>) -> GpuResult<LeaseInfo> {
                    let id = self.table.get(&this)?.id;
                    let i = self.service.lease_info(id)?;
                    Ok(LeaseInfo {
                        device: i.device,
                        granted_bytes: i.granted_bytes,
                        used_bytes: i.used_bytes,
                        remaining_ms: i.remaining_ms,
                    })
                }

                $($more)*

                fn drop(&mut self, this: Resource<LeaseHandle>) -> wasmtime::Result<()> {
                    let id = self.table.delete(this)?.id;
                    self.service.lease_drop(id);
                    Ok(())
                }
            }
        };
    };
}

leases!(v01);
leases!(v02 => {
    fn acquire_with(
        &mut self,
        request: super::bindings::v02::tasklet::gpu::leases::LeaseRequest,
        requires: super::bindings::v02::tasklet::gpu::leases::DeviceRequirements,
    ) -> GpuResult<Resource<LeaseHandle>> {
        let id = self.service.lease_acquire_with(
            gpu::LeaseRequest {
                min_vram: request.min_vram,
                secs: request.secs,
                device: request.device,
            },
            &crate::placement::DeviceRequirement {
                index: None,
                uuid: requires.uuid,
                model: requires.model,
                min_compute_capability: requires.min_compute_capability,
                min_total_memory: requires.min_total_memory,
            },
        )?;
        Ok(self.table.push(LeaseHandle { id })?)
    }

    fn gpu_time(&mut self, this: Resource<LeaseHandle>) -> GpuResult<u64> {
        let id = self.table.get(&this)?.id;
        let t = self.service.gpu_time(id)?;
        // u64 nanoseconds cover 584 years: a lease never gets near; saturate rather than wrap.
        Ok(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
    }
});
