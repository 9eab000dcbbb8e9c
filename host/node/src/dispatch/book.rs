//! What a connection's GPU thread remembers beside its `LocalGpu`: the wire's view of the
//! connection's leases (generations, GPU_SUBMIT regions) and modules (kernels by index).

use std::collections::HashMap;
use std::sync::Arc;
use tasklet_ptx::KernelInfo;
use tasklet_runtime::gpu::{BufferId, LeaseId, ModuleId, SessionId};

#[derive(Default)]
pub(super) struct Book {
    pub leases: HashMap<LeaseId, LeaseEntry>,
    pub modules: HashMap<ModuleId, ModuleEntry>,
}

pub(super) struct LeaseEntry {
    /// 1 when acquired, one more with each renewal.
    pub generation: u64,
    /// GPU_SUBMIT's view of the lease, from its first submission on.
    pub region: Option<Region>,
}

pub(super) struct ModuleEntry {
    pub session: SessionId,
    /// The module's kernels in the order LAUNCH indexes them; shared, so that a launch takes its
    /// kernel's name without copying it.
    pub kernels: Vec<Arc<str>>,
}

/// A lease used by GPU_SUBMIT: one session on it, and one buffer holding all of its memory.
pub(super) struct Region {
    pub session: SessionId,
    pub buffer: BufferId,
    pub size: u64,
    /// The module of the last submission, kept so that repeated submissions of one module load
    /// it once.
    pub module: Option<SubmitModule>,
}

pub(super) struct SubmitModule {
    pub ptx: Vec<u8>,
    pub id: ModuleId,
    pub kernels: Vec<KernelInfo>,
}

impl Book {
    /// Forgets the modules of a session that was closed.
    pub fn close_session(&mut self, session: SessionId) {
        self.modules.retain(|_, m| m.session != session);
    }
}
