//! [`RemoteGpu`]: the `GpuService` whose GPU is on a node, so that a tasklet running here does
//! its GPU work there, unchanged.
//!
//! Each operation is the node's request of the same name. LAUNCH and MEM_WRITE are pipelined:
//! they are sent without waiting (gathered, and written at the next operation that waits or
//! when enough have gathered), and their failures come back from the session's next `sync` or
//! read, naming the op. Everything else is one round trip. The node checks every operation
//! itself; nothing is checked here that the node would not check again, except what only this
//! side can know (a kernel's name, from the module's list).

use crate::client::{unexpected, NodeClient};
use crate::error::ClientError;
use std::collections::HashMap;
use tasklet_runtime::config::{Grant as HostGrant, Manifest, Right};
use tasklet_runtime::gpu::{
    BufferId, DeviceInfo, GpuService, GuestBytes, KernelArg, LaunchConfig, LeaseId, LeaseInfo,
    LeaseRequest, ModuleId, SessionId,
};
use tasklet_runtime::GpuError;
use tasklet_wire as wire;
use tasklet_wire::{rights, Reply, Request};

/// A node's GPU as a [`GpuService`].
pub struct RemoteGpu {
    client: NodeClient,
    /// The grant the node confirmed, when one was asked for.
    grant: Option<wire::Grant>,
    /// Each loaded module's kernel names, in the order LAUNCH indexes them.
    modules: HashMap<ModuleId, Vec<String>>,
}

impl RemoteGpu {
    /// The service over `client`'s connection, with the grant the node gives the tenant.
    pub fn new(client: NodeClient) -> RemoteGpu {
        RemoteGpu {
            client,
            grant: None,
            modules: HashMap::new(),
        }
    }

    /// The service over `client`'s connection, its grant narrowed to what `manifest` asks for
    /// (the node cuts it down to the tenant's policy too): the same grant a local run of the
    /// tasklet gets, checked by the node.
    pub fn for_manifest(
        mut client: NodeClient,
        manifest: &Manifest,
    ) -> Result<RemoteGpu, ClientError> {
        let grant = client.grant(&manifest_grant(manifest))?;
        Ok(RemoteGpu {
            client,
            grant: Some(grant),
            modules: HashMap::new(),
        })
    }

    /// The grant the node confirmed, if one was asked for.
    pub fn grant(&self) -> Option<&wire::Grant> {
        self.grant.as_ref()
    }

    pub fn client(&mut self) -> &mut NodeClient {
        &mut self.client
    }

    fn call(&mut self, request: &Request) -> Result<(Reply, Vec<u8>), GpuError> {
        Ok(self.client.request(request)?)
    }
}

/// What a manifest asks of the node's GPU, as GRANT says it.
pub fn manifest_grant(manifest: &Manifest) -> wire::Grant {
    host_grant_to_wire(&HostGrant {
        limits: manifest.limits,
        gpu: manifest.gpu,
        kernel_deadline: std::time::Duration::ZERO,
        gpu_time: None,
    })
}

fn host_grant_to_wire(grant: &HostGrant) -> wire::Grant {
    let bits = [
        (Right::Alloc, rights::ALLOC),
        (Right::Write, rights::WRITE),
        (Right::Read, rights::READ),
        (Right::Load, rights::LOAD),
        (Right::Launch, rights::LAUNCH),
    ];
    wire::Grant {
        memory: grant.limits.memory,
        max_vram: grant.gpu.max_vram,
        max_leases: grant.gpu.max_leases,
        max_lease_ms: u64::try_from(grant.gpu.max_lease_time.as_millis()).unwrap_or(u64::MAX),
        rights: bits
            .iter()
            .filter(|(right, _)| grant.gpu.rights.contains(*right))
            .fold(0, |all, (_, bit)| all | bit),
    }
}

fn to_wire_arg(arg: &KernelArg<'_>) -> wire::KernelArg {
    match *arg {
        KernelArg::Buffer { buffer, offset } => wire::KernelArg::Buffer {
            buffer: wire::BufferId(buffer.0),
            offset,
        },
        KernelArg::I32(v) => wire::KernelArg::I32(v),
        KernelArg::U32(v) => wire::KernelArg::U32(v),
        KernelArg::I64(v) => wire::KernelArg::I64(v),
        KernelArg::U64(v) => wire::KernelArg::U64(v),
        KernelArg::F32(v) => wire::KernelArg::F32(v),
        KernelArg::F64(v) => wire::KernelArg::F64(v),
        KernelArg::Bytes(v) => wire::KernelArg::Bytes(v.to_vec()),
    }
}

impl GpuService for RemoteGpu {
    fn devices(&mut self) -> Vec<DeviceInfo> {
        if self.grant.is_some_and(|g| g.max_leases == 0) {
            return Vec::new();
        }
        // The trait has no error to give: a node that cannot be asked lends nothing.
        let Ok(devices) = self.client.inventory() else {
            return Vec::new();
        };
        devices
            .into_iter()
            .map(|d| DeviceInfo {
                index: d.index,
                name: d.name,
                backend: d.backend,
                total_memory: d.total_memory,
                free_memory: d.free_memory,
                compute_capability: d.compute_capability,
            })
            .collect()
    }

    fn lease_acquire(&mut self, request: LeaseRequest) -> Result<LeaseId, GpuError> {
        let lease = self
            .client
            .lease_alloc(request.min_vram, request.secs, request.device)?;
        Ok(LeaseId(lease.lease.0))
    }

    fn lease_renew(&mut self, lease: LeaseId, secs: u32) -> Result<(), GpuError> {
        self.call(&Request::LeaseRenew {
            lease: wire::LeaseId(lease.0),
            seconds: secs,
        })?;
        Ok(())
    }

    fn lease_info(&mut self, lease: LeaseId) -> Result<LeaseInfo, GpuError> {
        match self.call(&Request::LeaseInfo {
            lease: wire::LeaseId(lease.0),
        })? {
            (
                Reply::LeaseInfo {
                    device,
                    granted_bytes,
                    used_bytes,
                    remaining_ms,
                    ..
                },
                _,
            ) => Ok(LeaseInfo {
                device,
                granted_bytes,
                used_bytes,
                remaining_ms,
            }),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn lease_drop(&mut self, lease: LeaseId) {
        // Whatever the answer, the lease is gone for the caller (an ended one too).
        let _ = self.client.mem_free(wire::LeaseId(lease.0));
    }

    fn session_open(&mut self, lease: LeaseId) -> Result<SessionId, GpuError> {
        match self.call(&Request::SessionOpen {
            lease: wire::LeaseId(lease.0),
        })? {
            (Reply::SessionOpen { session }, _) => Ok(SessionId(session.0)),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn session_drop(&mut self, session: SessionId) {
        let _ = self.call(&Request::SessionClose {
            session: wire::SessionId(session.0),
        });
    }

    fn mem_alloc(&mut self, session: SessionId, bytes: u64) -> Result<BufferId, GpuError> {
        match self.call(&Request::MemAlloc {
            session: wire::SessionId(session.0),
            bytes,
        })? {
            (Reply::MemAlloc { buffer }, _) => Ok(BufferId(buffer.0)),
            (other, _) => Err(unexpected(other).into()),
        }
    }

    fn mem_free(&mut self, session: SessionId, buffer: BufferId) {
        let _ = self.call(&Request::Free {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
        });
    }

    fn mem_write(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        // One MEM_WRITE may carry no more than the node accepts in one message (HELLO said how
        // much); a larger write goes as several, each at its own offset.
        let most = usize::try_from(self.client.max_stream_bytes())
            .unwrap_or(usize::MAX)
            .max(1);
        let mut at = 0usize;
        loop {
            let piece = &data[at..data.len().min(at.saturating_add(most))];
            let request = Request::MemWrite {
                session: wire::SessionId(session.0),
                buffer: wire::BufferId(buffer.0),
                offset: offset.saturating_add(at as u64),
                len: piece.len() as u64,
            };
            self.client.post(&request, piece)?;
            at += piece.len();
            if at >= data.len() {
                return Ok(());
            }
        }
    }

    fn mem_read(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        let (_, data) = self.call(&Request::MemRead {
            session: wire::SessionId(session.0),
            buffer: wire::BufferId(buffer.0),
            offset,
            len,
        })?;
        Ok(data)
    }

    fn mem_read_into(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        dst: GuestBytes,
    ) -> Result<(), GpuError> {
        let data = self.mem_read(session, buffer, offset, dst.len() as u64)?;
        dst.fill(&data)
    }

    fn mem_copy(
        &mut self,
        session: SessionId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        self.call(&Request::MemCopy {
            session: wire::SessionId(session.0),
            dst: wire::BufferId(dst.0 .0),
            dst_offset: dst.1,
            src: wire::BufferId(src.0 .0),
            src_offset: src.1,
            len,
        })?;
        Ok(())
    }

    fn module_load(&mut self, session: SessionId, ptx: &str) -> Result<ModuleId, GpuError> {
        let request = Request::ModuleLoad {
            session: wire::SessionId(session.0),
            ptx: ptx.as_bytes().to_vec(),
        };
        self.loaded(&request)
    }

    fn module_load_source(
        &mut self,
        session: SessionId,
        source: &str,
        options: &[String],
    ) -> Result<ModuleId, GpuError> {
        let request = Request::ModuleLoadSource {
            session: wire::SessionId(session.0),
            source: source.to_owned(),
            options: options.to_vec(),
        };
        self.loaded(&request)
    }

    fn module_kernels(&mut self, _session: SessionId, module: ModuleId) -> Vec<String> {
        self.modules.get(&module).cloned().unwrap_or_default()
    }

    fn module_unload(&mut self, session: SessionId, module: ModuleId) {
        self.modules.remove(&module);
        let _ = self.call(&Request::ModuleUnload {
            session: wire::SessionId(session.0),
            module: wire::ModuleId(module.0),
        });
    }

    fn launch(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: &str,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<(), GpuError> {
        // A module this side never loaded is the node's to refuse (index 0 names nothing then).
        let index = match self.modules.get(&module) {
            None => 0,
            Some(names) => match names.iter().position(|n| n == kernel) {
                Some(i) => i as u32,
                None => {
                    return Err(GpuError::LaunchFailed(format!(
                        "no kernel named {kernel:?} in the module; it has: {}",
                        names.join(", ")
                    )))
                }
            },
        };
        let request = Request::Launch(wire::Launch {
            session: wire::SessionId(session.0),
            module: wire::ModuleId(module.0),
            kernel: index,
            grid: config.grid,
            block: config.block,
            shared_mem_bytes: config.shared_mem_bytes,
            args: args.iter().map(to_wire_arg).collect(),
        });
        self.client.post(&request, &[])?;
        Ok(())
    }

    fn sync(&mut self, session: SessionId) -> Result<(), GpuError> {
        self.call(&Request::Sync {
            session: wire::SessionId(session.0),
        })?;
        Ok(())
    }
}

impl RemoteGpu {
    fn loaded(&mut self, request: &Request) -> Result<ModuleId, GpuError> {
        match self.call(request)? {
            (Reply::ModuleLoad(loaded) | Reply::ModuleLoadSource(loaded), _) => {
                let id = ModuleId(loaded.module.0);
                let names = loaded.kernels.into_iter().map(|k| k.name).collect();
                self.modules.insert(id, names);
                Ok(id)
            }
            (other, _) => Err(unexpected(other).into()),
        }
    }
}
