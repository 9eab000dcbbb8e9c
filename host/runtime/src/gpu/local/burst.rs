//! Bursts on a [`LocalGpu`]: one kernel launched many times in one call, every launch checked
//! before any is queued, then all of them posted to the lease's worker back to back (which hands
//! a run of posted launches to its backend together: on cuda, as graph launches of chains of
//! kernel nodes).

use super::LocalGpu;
use crate::config::Right;
use crate::error::{invalid, quoted, GpuError};
use crate::gpu::types::{check_burst_size, Burst, KernelArg, KernelRef, ModuleId, SessionId};
use tasklet_worker::Launch;

impl LocalGpu {
    /// [`crate::gpu::GpuService::launch_burst`]: the first launch's ordinal.
    pub(super) fn burst_counted(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &Burst<'_>,
    ) -> Result<u64, GpuError> {
        self.need(Right::Launch)?;
        let n = burst.counts.len();
        if n == 0 {
            return Err(invalid("a burst needs at least one launch"));
        }
        check_burst_size(n, burst.changes.len())?;
        let changed: u64 = burst.counts.iter().map(|&c| u64::from(c)).sum();
        if changed != burst.changes.len() as u64 {
            return Err(invalid(format!(
                "the burst's launches count {changed} changed arguments, and {} are given",
                burst.changes.len()
            )));
        }
        let mut blocks = std::mem::take(&mut self.arg_block);
        let r = self.burst_with(session, module, kernel, burst, &mut blocks);
        self.arg_block = blocks;
        let ordinal = self.launched.entry(r?).or_insert(0);
        let first = *ordinal + 1;
        *ordinal += n as u64;
        Ok(first)
    }

    /// Builds and checks every launch's argument block (all of them, one after the other, in
    /// `blocks`), then posts them all. Nothing is posted unless every launch passed.
    fn burst_with(
        &self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &Burst<'_>,
        blocks: &mut Vec<u8>,
    ) -> Result<crate::gpu::LeaseId, GpuError> {
        let s = self.session(session)?;
        let (m, index) = s.kernel(module, kernel)?;
        let entry = &m.kernels[index];
        let config = burst.config;
        let limits = &self.manager.device_of(&s.lease).launch_limits;
        let mut args: Vec<KernelArg<'_>> = burst.args.to_vec();
        let mut block = Vec::new();
        let mut ends = Vec::with_capacity(burst.counts.len());
        let mut changes = burst.changes;
        blocks.clear();
        for (i, &count) in burst.counts.iter().enumerate() {
            let within = || format!("launch {i} of the burst");
            args.copy_from_slice(burst.args);
            let (own, rest) = changes.split_at(count as usize);
            changes = rest;
            for change in own {
                let slot = args.get_mut(change.index as usize).ok_or_else(|| {
                    invalid(format!(
                        "{} changes argument {}, and the burst has {}",
                        within(),
                        change.index,
                        burst.args.len()
                    ))
                })?;
                *slot = change.arg;
            }
            entry
                .argument_block(&args, |id| s.buffer(id), &mut block)
                .map_err(|e| e.within(&within()))?;
            limits
                .check(
                    config.grid,
                    config.block,
                    config.shared_mem_bytes,
                    block.len(),
                )
                .map_err(|e| {
                    GpuError::LaunchFailed(format!(
                        "{}: cannot launch kernel {}: {e}",
                        within(),
                        quoted(&entry.info.name)
                    ))
                })?;
            blocks.extend_from_slice(&block);
            ends.push(blocks.len());
        }
        let deadline = self.usage.deadline(&s.lease, self.grant.kernel_deadline)?;
        self.run(&s.lease, |w| {
            let mut start = 0;
            for &end in &ends {
                w.launch(&Launch {
                    module: m.id,
                    kernel: index as u32,
                    grid: config.grid,
                    block: config.block,
                    shared_mem_bytes: config.shared_mem_bytes,
                    args: &blocks[start..end],
                    deadline,
                })?;
                start = end;
            }
            Ok(())
        })?;
        self.usage.launched_n(ends.len() as u64);
        Ok(s.lease_id)
    }
}
