//! The GPU service a deployed tasklet's run gets: the node's `LocalGpu` under the run's grant,
//! with its leases counted in the tenant's `gpu_lease_acquired` and `gpu_lease_dropped`, as a
//! remote client's are. Every lease acquired is counted dropped once: when the tasklet drops it,
//! or when the run ends with it held.

use crate::metrics::TenantMetrics;
use std::collections::HashSet;
use tasklet_runtime::gpu::{
    BufferId, Burst, DeviceInfo, GpuService, GraphArg, GraphId, GuestBytes, KernelArg, KernelRef,
    KernelSignature, LaunchConfig, LeaseId, LeaseInfo, LeaseRequest, LocalGpu, ModuleId,
    ModuleSource, SessionId,
};
use tasklet_runtime::{DeviceRequirement, GpuError};

pub(crate) struct MeteredGpu {
    gpu: LocalGpu,
    metrics: TenantMetrics,
    live: HashSet<LeaseId>,
}

impl MeteredGpu {
    pub fn new(gpu: LocalGpu, metrics: TenantMetrics) -> MeteredGpu {
        MeteredGpu {
            gpu,
            metrics,
            live: HashSet::new(),
        }
    }

    /// Counts a lease the run now holds, once.
    fn acquired(&mut self, lease: LeaseId) {
        if self.live.insert(lease) {
            self.metrics.lease_acquired.inc();
        }
    }
}

impl Drop for MeteredGpu {
    fn drop(&mut self) {
        self.end();
    }
}

impl GpuService for MeteredGpu {
    fn run_ends_at(&mut self, ends: std::time::Instant) {
        self.gpu.run_ends_at(ends);
    }

    fn end(&mut self) {
        self.gpu.end();
        self.metrics.lease_dropped.inc_by(self.live.len() as u64);
        self.live.clear();
    }

    fn devices(&mut self) -> Vec<DeviceInfo> {
        self.gpu.devices()
    }

    fn lease_acquire(&mut self, request: LeaseRequest) -> Result<LeaseId, GpuError> {
        let lease = self.gpu.lease_acquire(request)?;
        self.acquired(lease);
        Ok(lease)
    }

    fn lease_acquire_with(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
    ) -> Result<LeaseId, GpuError> {
        let lease = self.gpu.lease_acquire_with(request, requires)?;
        self.acquired(lease);
        Ok(lease)
    }

    fn lease_acquire_group(
        &mut self,
        request: LeaseRequest,
        requires: &DeviceRequirement,
        count: u32,
    ) -> Result<Vec<LeaseId>, GpuError> {
        let leases = self.gpu.lease_acquire_group(request, requires, count)?;
        for &lease in &leases {
            self.acquired(lease);
        }
        Ok(leases)
    }

    fn lease_renew(&mut self, lease: LeaseId, secs: u32) -> Result<(), GpuError> {
        self.gpu.lease_renew(lease, secs)
    }

    fn lease_info(&mut self, lease: LeaseId) -> Result<LeaseInfo, GpuError> {
        self.gpu.lease_info(lease)
    }

    fn lease_drop(&mut self, lease: LeaseId) {
        self.gpu.lease_drop(lease);
        if self.live.remove(&lease) {
            self.metrics.lease_dropped.inc();
        }
    }

    fn session_open(&mut self, lease: LeaseId) -> Result<SessionId, GpuError> {
        self.gpu.session_open(lease)
    }

    fn session_drop(&mut self, session: SessionId) {
        self.gpu.session_drop(session)
    }

    fn mem_alloc(&mut self, session: SessionId, bytes: u64) -> Result<BufferId, GpuError> {
        self.gpu.mem_alloc(session, bytes)
    }

    fn mem_free(&mut self, session: SessionId, buffer: BufferId) {
        self.gpu.mem_free(session, buffer)
    }

    fn mem_write(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        self.gpu.mem_write(session, buffer, offset, data)
    }

    fn mem_read(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        self.gpu.mem_read(session, buffer, offset, len)
    }

    fn mem_read_into(
        &mut self,
        session: SessionId,
        buffer: BufferId,
        offset: u64,
        dst: GuestBytes,
    ) -> Result<(), GpuError> {
        self.gpu.mem_read_into(session, buffer, offset, dst)
    }

    fn mem_copy(
        &mut self,
        session: SessionId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        self.gpu.mem_copy(session, dst, src, len)
    }

    fn mem_copy_between(
        &mut self,
        dst: (SessionId, BufferId, u64),
        src: (SessionId, BufferId, u64),
        len: u64,
    ) -> Result<(), GpuError> {
        self.gpu.mem_copy_between(dst, src, len)
    }

    fn module_load(&mut self, session: SessionId, ptx: &str) -> Result<ModuleId, GpuError> {
        self.gpu.module_load(session, ptx)
    }

    fn module_load_source(
        &mut self,
        session: SessionId,
        source: &str,
        options: &[String],
    ) -> Result<ModuleId, GpuError> {
        self.gpu.module_load_source(session, source, options)
    }

    fn module_kernels(&mut self, session: SessionId, module: ModuleId) -> Vec<String> {
        self.gpu.module_kernels(session, module)
    }

    fn module_signatures(&mut self, session: SessionId, module: ModuleId) -> Vec<KernelSignature> {
        self.gpu.module_signatures(session, module)
    }

    fn module_unload(&mut self, session: SessionId, module: ModuleId) {
        self.gpu.module_unload(session, module)
    }

    fn module_reload(
        &mut self,
        session: SessionId,
        module: ModuleId,
        source: ModuleSource<'_>,
    ) -> Result<ModuleId, GpuError> {
        self.gpu.module_reload(session, module, source)
    }

    fn launch(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: &str,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<(), GpuError> {
        self.gpu.launch(session, module, kernel, config, args)
    }

    fn launch_kernel(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        self.gpu
            .launch_kernel(session, module, kernel, config, args)
    }

    fn launch_burst(
        &mut self,
        session: SessionId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        burst: &Burst<'_>,
    ) -> Result<u64, GpuError> {
        self.gpu.launch_burst(session, module, kernel, burst)
    }

    fn graph_create(&mut self, session: SessionId) -> Result<GraphId, GpuError> {
        self.gpu.graph_create(session)
    }

    fn graph_launch(
        &mut self,
        session: SessionId,
        graph: GraphId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[GraphArg<'_>],
    ) -> Result<u32, GpuError> {
        self.gpu
            .graph_launch(session, graph, module, kernel, config, args)
    }

    fn graph_copy(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        src: (BufferId, u64),
        len: u64,
    ) -> Result<u32, GpuError> {
        self.gpu.graph_copy(session, graph, dst, src, len)
    }

    fn graph_fill(
        &mut self,
        session: SessionId,
        graph: GraphId,
        dst: (BufferId, u64),
        len: u64,
        value: u32,
    ) -> Result<u32, GpuError> {
        self.gpu.graph_fill(session, graph, dst, len, value)
    }

    fn graph_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        value: u64,
    ) -> Result<u32, GpuError> {
        self.gpu.graph_scalar(session, graph, value)
    }

    fn graph_set_scalar(
        &mut self,
        session: SessionId,
        graph: GraphId,
        scalar: u32,
        value: u64,
    ) -> Result<(), GpuError> {
        self.gpu.graph_set_scalar(session, graph, scalar, value)
    }

    fn graph_set_args(
        &mut self,
        session: SessionId,
        graph: GraphId,
        node: u32,
        args: &[GraphArg<'_>],
    ) -> Result<(), GpuError> {
        self.gpu.graph_set_args(session, graph, node, args)
    }

    fn graph_replay(
        &mut self,
        session: SessionId,
        graph: GraphId,
        times: u32,
    ) -> Result<(), GpuError> {
        self.gpu.graph_replay(session, graph, times)
    }

    fn graph_drop(&mut self, session: SessionId, graph: GraphId) {
        self.gpu.graph_drop(session, graph)
    }

    fn queue_op(
        &mut self,
        session: SessionId,
        op: tasklet_runtime::gpu::QueueOp,
    ) -> Result<tasklet_runtime::gpu::QueueReply, GpuError> {
        self.gpu.queue_op(session, op)
    }

    fn stream_launch(
        &mut self,
        session: SessionId,
        stream: tasklet_runtime::gpu::StreamId,
        module: ModuleId,
        kernel: KernelRef<'_>,
        config: &LaunchConfig,
        args: &[KernelArg<'_>],
    ) -> Result<u64, GpuError> {
        self.gpu
            .stream_launch(session, stream, module, kernel, config, args)
    }

    fn stream_write(
        &mut self,
        session: SessionId,
        stream: tasklet_runtime::gpu::StreamId,
        buffer: BufferId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), GpuError> {
        self.gpu.stream_write(session, stream, buffer, offset, data)
    }

    fn stream_read(
        &mut self,
        session: SessionId,
        stream: tasklet_runtime::gpu::StreamId,
        buffer: BufferId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        self.gpu.stream_read(session, stream, buffer, offset, len)
    }

    fn actor_op(
        &mut self,
        session: SessionId,
        op: tasklet_runtime::gpu::ActorOp<'_>,
    ) -> Result<tasklet_runtime::gpu::ActorReply, GpuError> {
        self.gpu.actor_op(session, op)
    }

    fn sync(&mut self, session: SessionId) -> Result<(), GpuError> {
        self.gpu.sync(session)
    }

    fn gpu_time(&mut self, lease: LeaseId) -> Result<std::time::Duration, GpuError> {
        self.gpu.gpu_time(lease)
    }
}
