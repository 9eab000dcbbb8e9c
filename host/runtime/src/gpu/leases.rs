//! `tasklet:gpu/leases`: acquire, renew, inspect and drop leases within the tasklet's grant.

use super::error::{invalid, quota, unauthorized, GpuResult};
use super::{GpuState, LeaseHandle};
use crate::bindings::tasklet::gpu::leases::{Host, HostLease, LeaseInfo, LeaseRequest};
use crate::bindings::tasklet::gpu::types::GpuError;
use crate::lease::{EndReason, Lease};
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::Resource;

impl Host for GpuState<'_> {}

impl GpuState<'_> {
    pub(super) fn lease(&self, handle: &Resource<LeaseHandle>) -> GpuResult<Arc<Lease>> {
        let id = self.table.get(handle)?.id;
        self.ctx.leases.get(&id).cloned().ok_or_else(|| {
            super::error::GpuFailure::Trap(wasmtime::format_err!(
                "lease {id} missing from its tasklet"
            ))
        })
    }
}

impl HostLease for GpuState<'_> {
    fn acquire(&mut self, request: LeaseRequest) -> GpuResult<Resource<LeaseHandle>> {
        let grant = self.ctx.grant.gpu;
        if grant.max_leases == 0 {
            return Err(unauthorized(
                "this tasklet may not lease GPUs: its manifest has no [gpu] section, or the node policy grants no leases",
            ));
        }
        let device = self.ctx.manager.device().index;
        if let Some(asked) = request.device.filter(|&d| d != device) {
            return Err(invalid(format!(
                "no device {asked}; this node lends device {device} (see inventory)"
            )));
        }
        if request.min_vram == 0 || request.secs == 0 {
            return Err(invalid("a lease needs min-vram > 0 bytes and secs > 0"));
        }
        let ttl = Duration::from_secs(request.secs.into());
        if ttl > grant.max_lease_time {
            return Err(quota(format!(
                "a lease of {}s is longer than the granted {}s (max-lease-secs)",
                request.secs,
                grant.max_lease_time.as_secs()
            )));
        }
        // Granted in whole allocation units, so that what is granted can be allocated.
        let bytes = request
            .min_vram
            .checked_next_multiple_of(tasklet_worker::ALLOC_GRANULE)
            .ok_or_else(|| invalid("min-vram is too large"))?;
        let live: Vec<&Arc<Lease>> = self.ctx.leases.values().filter(|l| l.is_live()).collect();
        if live.len() >= grant.max_leases as usize {
            return Err(quota(format!(
                "this tasklet already holds {} lease(s), the most it is granted (max-leases); drop one first",
                live.len()
            )));
        }
        let held: u64 = live.iter().map(|l| l.granted).sum();
        if held.saturating_add(bytes) > grant.max_vram {
            return Err(quota(format!(
                "a lease of {bytes} bytes would bring this tasklet to {} bytes of VRAM, over its grant of {} (max-vram)",
                held.saturating_add(bytes),
                grant.max_vram
            )));
        }
        let lease = self.ctx.manager.acquire(bytes, ttl)?;
        let id = lease.id;
        self.ctx.leases.insert(id, lease);
        Ok(self.table.push(LeaseHandle { id })?)
    }

    fn renew(&mut self, this: Resource<LeaseHandle>, secs: u32) -> GpuResult<()> {
        let lease = self.lease(&this)?;
        if secs == 0 {
            return Err(invalid("renew needs secs > 0"));
        }
        let ceiling = self.ctx.grant.gpu.max_lease_time;
        Ok(self
            .ctx
            .manager
            .renew(&lease, Duration::from_secs(secs.into()), ceiling)?)
    }

    fn info(&mut self, this: Resource<LeaseHandle>) -> GpuResult<LeaseInfo> {
        // The hot path borrows the lease: no reference-count traffic for a host-only call.
        let id = self.table.get(&this)?.id;
        if let Some(lease) = self.ctx.leases.get(&id) {
            if let Some((used, remaining)) = lease.snapshot() {
                return Ok(LeaseInfo {
                    device: lease.device,
                    granted_bytes: lease.granted,
                    used_bytes: used,
                    remaining_ms: remaining.as_millis().try_into().unwrap_or(u64::MAX),
                });
            }
        }
        // Ended or expired: report, and act on, the end of the lease in the one place that does both.
        let lease = self.lease(&this)?;
        self.ctx.manager.with_worker(&lease, |_| Ok(()))?;
        Err(GpuError::LeaseExpired("the lease has ended".into()).into())
    }

    fn drop(&mut self, this: Resource<LeaseHandle>) -> wasmtime::Result<()> {
        let id = self.table.delete(this)?.id;
        if let Some(lease) = self.ctx.leases.remove(&id) {
            self.ctx.manager.end(&lease, EndReason::Dropped);
        }
        Ok(())
    }
}
