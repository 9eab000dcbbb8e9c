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
        let id = self
            .service
            .lease_acquire_with(request_v02(request), &requirement_v02(requires))?;
        Ok(self.table.push(LeaseHandle { id })?)
    }

    fn acquire_group(
        &mut self,
        request: super::bindings::v02::tasklet::gpu::leases::LeaseRequest,
        requires: super::bindings::v02::tasklet::gpu::leases::DeviceRequirements,
        count: u32,
    ) -> GpuResult<Vec<Resource<LeaseHandle>>> {
        let ids = self.service.lease_acquire_group(
            request_v02(request),
            &requirement_v02(requires),
            count,
        )?;
        let mut handles = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            match self.table.push(LeaseHandle { id }) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // All or none: the leases not yet handed over go back with those that were.
                    for h in handles {
                        if let Ok(held) = self.table.delete(h) {
                            self.service.lease_drop(held.id);
                        }
                    }
                    for &rest in &ids[i..] {
                        self.service.lease_drop(rest);
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(handles)
    }

    fn gpu_time(&mut self, this: Resource<LeaseHandle>) -> GpuResult<u64> {
        let id = self.table.get(&this)?.id;
        let t = self.service.gpu_time(id)?;
        // u64 nanoseconds cover 584 years: a lease never gets near; saturate rather than wrap.
        Ok(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
    }
});

fn request_v02(r: super::bindings::v02::tasklet::gpu::leases::LeaseRequest) -> gpu::LeaseRequest {
    gpu::LeaseRequest {
        min_vram: r.min_vram,
        secs: r.secs,
        device: r.device,
    }
}

fn requirement_v02(
    r: super::bindings::v02::tasklet::gpu::leases::DeviceRequirements,
) -> crate::placement::DeviceRequirement {
    crate::placement::DeviceRequirement {
        index: None,
        uuid: r.uuid,
        model: r.model,
        min_compute_capability: r.min_compute_capability,
        min_total_memory: r.min_total_memory,
    }
}
