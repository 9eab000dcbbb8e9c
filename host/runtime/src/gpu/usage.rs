//! What one holder of a [`super::LocalGpu`] (a tasklet run, or a client's connection to a node)
//! has used of the GPU: device time, checked against its `gpu-seconds` quota, and the figures
//! `tasklet run --stats` shows (launches, bytes moved, peak device memory).
//!
//! The device time comes from the lease manager, which charges every lease's reported time to
//! the holder's [`GpuAccount`] as well; this file only reads it. A kernel may not outlast the
//! quota: its deadline is cut to what is left ([`Usage::deadline`]). A kernel stopped at its
//! deadline, whichever, is charged that deadline by its lease, its worker being killed before it
//! could report the time; one stopped at a deadline the quota cut is reported as the quota's, not
//! as a deadline's ([`Usage::blame`]). What is left is known as of the worker's last report, so
//! kernels queued together before the quota is seen used may each run for what was left then.

use crate::error::{quota, GpuError};
use crate::lease::{EndReason, GpuAccount, Lease, LeaseManager};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// A holder's usage, as [`super::LocalGpu`] keeps it.
pub(super) struct Usage {
    account: GpuAccount,
    quota: Option<Duration>,
    counters: Arc<Counters>,
    /// A launch was given a deadline cut to what was left of the quota: a kernel stopped at its
    /// deadline from now on was stopped by the quota. Cleared by a sync that succeeds.
    cut: Cell<bool>,
}

#[derive(Debug, Default)]
struct Counters {
    launches: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
    peak_vram: AtomicU64,
}

/// A holder's figures at one moment ([`UsageHandle::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageStats {
    /// Device time of its kernels, all its leases together (as their workers last reported).
    pub gpu_time: Duration,
    /// Launches accepted (including any that failed later on the device).
    pub launches: u64,
    /// Bytes written to device memory from the tasklet.
    pub bytes_written: u64,
    /// Bytes read from device memory into the tasklet.
    pub bytes_read: u64,
    /// The most device memory its leases held at once (in allocation units, as charged).
    pub peak_vram: u64,
}

/// A holder's usage, readable after the holder is gone (e.g. once its run has ended).
#[derive(Debug, Clone)]
pub struct UsageHandle {
    account: GpuAccount,
    counters: Arc<Counters>,
}

impl UsageHandle {
    pub fn stats(&self) -> UsageStats {
        let c = &self.counters;
        UsageStats {
            gpu_time: self.account.used(),
            launches: c.launches.load(Relaxed),
            bytes_written: c.written.load(Relaxed),
            bytes_read: c.read.load(Relaxed),
            peak_vram: c.peak_vram.load(Relaxed),
        }
    }

    /// The tenant the holder's GPU time is charged to.
    pub fn tenant(&self) -> &str {
        &self.account.tenant
    }
}

/// `d` in seconds, as the policy's `gpu-seconds` is written and people read it.
fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

impl Usage {
    pub(super) fn new(tenant: &str, quota: Option<Duration>) -> Usage {
        Usage {
            account: GpuAccount::new(tenant),
            quota,
            counters: Arc::default(),
            cut: Cell::new(false),
        }
    }

    /// Acquires under this usage count in the tenant's `totals`, all its holders together.
    pub(super) fn set_totals(&mut self, totals: crate::config::TenantTotals) {
        self.account.totals = totals;
    }

    pub(super) fn account(&self) -> &GpuAccount {
        &self.account
    }

    pub(super) fn handle(&self) -> UsageHandle {
        UsageHandle {
            account: self.account.clone(),
            counters: Arc::clone(&self.counters),
        }
    }

    /// What is left of the quota (`None`: there is none), or `quota-exceeded` once it is used.
    pub(super) fn check(&self) -> Result<Option<Duration>, GpuError> {
        let Some(cap) = self.quota else {
            return Ok(None);
        };
        let used = self.account.used();
        if used >= cap {
            return Err(quota(format!(
                "this tasklet's kernels have taken {} of GPU time, all that its grant allows (`gpu-seconds` = {}, \
                 set by the node policy under [tasklets] or [tenants.NAME])",
                secs(used),
                secs(cap)
            )));
        }
        Ok(Some(cap - used))
    }

    /// The deadline of a kernel launched now under `lease`: `kernel_deadline`, cut to what is
    /// left of the quota, and noted on the lease, which charges it to a kernel stopped at it
    /// ([`Lease::gave_deadline`]). Fails `quota-exceeded` once the quota is used.
    pub(super) fn deadline(
        &self,
        lease: &Lease,
        kernel_deadline: Duration,
    ) -> Result<Duration, GpuError> {
        let deadline = match self.check()? {
            Some(left) if left < kernel_deadline => {
                self.cut.set(true);
                left
            }
            _ => kernel_deadline,
        };
        lease.gave_deadline(deadline);
        Ok(deadline)
    }

    /// `err`, from an operation under `lease`, as the holder should see it: a kernel stopped at
    /// a deadline the quota cut used up the quota (the lease charged the deadline; what is left
    /// of the quota past that, if a cut on another lease left any, is charged here) and fails
    /// `quota-exceeded`; anything else is left as it is.
    pub(super) fn blame(&self, manager: &LeaseManager, lease: &Lease, err: GpuError) -> GpuError {
        let stopped = matches!(err, GpuError::DeadlineExceeded(_))
            && matches!(lease.end_reason(), Some(EndReason::Poisoned(_)));
        let Some(cap) = self.quota.filter(|_| stopped && self.cut.get()) else {
            return err;
        };
        manager.charge_gpu(lease, cap.saturating_sub(self.account.used()));
        quota(format!(
            "a kernel ran past what was left of this tasklet's GPU time (`gpu-seconds` = {}) and was stopped with \
             its worker, which ended the lease; raise `gpu-seconds` in the node policy if the tasklet needs more",
            secs(cap)
        ))
    }

    /// A sync succeeded: every kernel so far ended within its deadline.
    pub(super) fn synced(&self) {
        self.cut.set(false);
    }

    pub(super) fn launched(&self) {
        self.launched_n(1);
    }

    /// `n` launches at once (a burst's, a graph replay's): one add, not `n`.
    pub(super) fn launched_n(&self, n: u64) {
        self.counters.launches.fetch_add(n, Relaxed);
    }

    pub(super) fn wrote(&self, bytes: usize) {
        self.counters.written.fetch_add(bytes as u64, Relaxed);
    }

    pub(super) fn read(&self, bytes: usize) {
        self.counters.read.fetch_add(bytes as u64, Relaxed);
    }

    /// The holder's leases hold `bytes` of device memory now.
    pub(super) fn holding(&self, bytes: u64) {
        self.counters.peak_vram.fetch_max(bytes, Relaxed);
    }
}
