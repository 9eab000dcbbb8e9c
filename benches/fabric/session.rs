//! The GPU operations timed on both paths, written once against `GpuService`: locally a
//! `LocalGpu` over this process's host, remotely a `RemoteGpu` over the node on loopback. The
//! same calls in the same order, so that the difference between the two is the network and the
//! node.

use crate::stats::Samples;
use std::time::{Duration, Instant};
use tasklet_runtime::gpu::{
    BufferId, GpuService, LaunchConfig, LeaseId, LeaseRequest, ModuleId, SessionId,
};

/// The module with the empty kernel every launch runs.
const FAULTS_PTX: &str = include_str!("../../kernels/faults.ptx");
const EMPTY_KERNEL: &str = "empty";
const ONE_THREAD: LaunchConfig = LaunchConfig {
    grid: [1, 1, 1],
    block: [1, 1, 1],
    shared_mem_bytes: 0,
};

/// Long enough for the slowest phase on the slowest backend.
const LEASE_SECS: u32 = 900;

/// One async batch's times ([`Session::launch_batch`]).
#[derive(Clone, Copy)]
pub struct Batch {
    /// The launches and the sync.
    pub total: Duration,
    /// Until the last launch returned.
    pub posted: Duration,
}

/// A lease, a session on it and the module loaded: what every timed operation needs.
pub struct Session {
    gpu: Box<dyn GpuService>,
    lease: LeaseId,
    session: SessionId,
    module: ModuleId,
    /// The bulk transfers' buffer, allocated by the first.
    buffer: Option<(BufferId, u64)>,
}

impl Session {
    /// Leases `vram` bytes (at least 1 MiB) on `gpu`, opens a session and loads the module.
    pub fn open(mut gpu: Box<dyn GpuService>, vram: u64) -> Result<Session, String> {
        let lease = gpu
            .lease_acquire(LeaseRequest {
                min_vram: vram.max(1 << 20),
                secs: LEASE_SECS,
                device: None,
            })
            .map_err(|e| format!("lease: {e}"))?;
        let session = match gpu.session_open(lease) {
            Ok(session) => session,
            Err(e) => {
                gpu.lease_drop(lease);
                return Err(format!("session: {e}"));
            }
        };
        let mut opened = Session {
            gpu,
            lease,
            session,
            module: ModuleId(0),
            buffer: None,
        };
        opened.module = opened
            .gpu
            .module_load(session, FAULTS_PTX)
            .map_err(|e| format!("module load: {e}"))?;
        Ok(opened)
    }

    fn launch(&mut self) -> Result<(), String> {
        self.gpu
            .launch(self.session, self.module, EMPTY_KERNEL, &ONE_THREAD, &[])
            .map_err(|e| format!("launch: {e}"))
    }

    fn sync(&mut self) -> Result<(), String> {
        self.gpu
            .sync(self.session)
            .map_err(|e| format!("sync: {e}"))
    }

    /// Launch of the empty kernel + sync, each pair timed: `warmup` untimed, then up to
    /// `count`, for at most `budget`; `pause` (untimed, asleep) before each pair.
    pub fn launch_sync(
        &mut self,
        warmup: usize,
        count: usize,
        budget: Duration,
        pause: Duration,
    ) -> Result<Samples, String> {
        let mut samples = Samples::with_capacity(count);
        let start = Instant::now();
        for i in 0..warmup + count {
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            let t = Instant::now();
            self.launch()?;
            self.sync()?;
            if i >= warmup {
                samples.push(t.elapsed());
            }
            if start.elapsed() > budget {
                break;
            }
        }
        Ok(samples)
    }

    /// `count` launch + sync pairs, each between the timeline's markers (at most `budget`).
    pub fn launch_sync_marked(&mut self, count: usize, budget: Duration) -> Result<(), String> {
        let start = Instant::now();
        for _ in 0..count {
            crate::timeline::begin();
            self.launch()?;
            self.sync()?;
            crate::timeline::end();
            if start.elapsed() > budget {
                break;
            }
        }
        Ok(())
    }

    /// `launches` launches of the empty kernel, then one sync: the time of the whole batch, and
    /// the time until its last launch returned (what the caller's side of the path costs).
    pub fn launch_batch(&mut self, launches: usize) -> Result<Batch, String> {
        let t = Instant::now();
        for _ in 0..launches {
            self.launch()?;
        }
        let posted = t.elapsed();
        self.sync()?;
        Ok(Batch {
            total: t.elapsed(),
            posted,
        })
    }

    fn bulk_buffer(&mut self, len: u64) -> Result<BufferId, String> {
        match self.buffer {
            Some((buffer, size)) if size >= len => Ok(buffer),
            _ => {
                if let Some((old, _)) = self.buffer.take() {
                    self.gpu.mem_free(self.session, old);
                }
                let buffer = self
                    .gpu
                    .mem_alloc(self.session, len)
                    .map_err(|e| format!("alloc of {len} bytes: {e}"))?;
                self.buffer = Some((buffer, len));
                Ok(buffer)
            }
        }
    }

    /// Writes `data` to the device and waits until it is there (write + sync).
    pub fn bulk_write(&mut self, data: &[u8]) -> Result<Duration, String> {
        let buffer = self.bulk_buffer(data.len() as u64)?;
        let t = Instant::now();
        self.gpu
            .mem_write(self.session, buffer, 0, data)
            .map_err(|e| format!("write of {} bytes: {e}", data.len()))?;
        self.sync()?;
        Ok(t.elapsed())
    }

    /// Reads `len` bytes back from the device; the time, and what was read.
    pub fn bulk_read(&mut self, len: u64) -> Result<(Duration, Vec<u8>), String> {
        let buffer = self.bulk_buffer(len)?;
        let t = Instant::now();
        let data = self
            .gpu
            .mem_read(self.session, buffer, 0, len)
            .map_err(|e| format!("read of {len} bytes: {e}"))?;
        Ok((t.elapsed(), data))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some((buffer, _)) = self.buffer.take() {
            self.gpu.mem_free(self.session, buffer);
        }
        self.gpu.module_unload(self.session, self.module);
        self.gpu.session_drop(self.session);
        self.gpu.lease_drop(self.lease);
    }
}
