//! `tasklet:gpu/sessions`: session, buffer and module handles over the service's ids.
//!
//! The guest can only name handles it holds (the component model sees to that); which session a
//! buffer or module belongs to, and everything else, the service checks.

use super::{
    BufferHandle, GpuFailure, GpuResult, GpuState, GraphHandle, KernelHandle, LeaseHandle,
    ModuleHandle, SessionHandle,
};
use crate::gpu::{self, GuestBytes};
use wasmtime::component::{Resource, WasmList};
use wasmtime::StoreContextMut;

impl GpuState<'_> {
    fn session_id(&self, handle: &Resource<SessionHandle>) -> GpuResult<gpu::SessionId> {
        Ok(self.table.get(handle)?.id)
    }

    fn buffer_id(&self, handle: &Resource<BufferHandle>) -> GpuResult<gpu::BufferId> {
        Ok(self.table.get(handle)?.id)
    }

    fn add_module(
        &mut self,
        session: gpu::SessionId,
        id: gpu::ModuleId,
    ) -> GpuResult<Resource<ModuleHandle>> {
        Ok(self.table.push(ModuleHandle { id, session })?)
    }

    /// Lifts a launch's arguments (of either version, through `lift`) and calls `launch` with
    /// them: on the stack for the usual handful, so a launch allocates nothing. The buffer
    /// relocations of relocated bytes are resolved first, all into one list (through
    /// `relocations`, in argument order), of which `lift` takes each argument's share.
    fn with_args<A, R>(
        &mut self,
        args: &[A],
        relocations: impl Fn(&Self, &A, &mut Vec<gpu::Relocation>) -> GpuResult<()>,
        lift: impl for<'x> Fn(&Self, &'x A, &mut &'x [gpu::Relocation]) -> GpuResult<gpu::KernelArg<'x>>,
        launch: impl FnOnce(&mut Self, &[gpu::KernelArg<'_>]) -> GpuResult<R>,
    ) -> GpuResult<R> {
        let mut resolved = Vec::new();
        for arg in args {
            relocations(self, arg, &mut resolved)?;
        }
        let mut rest: &[gpu::Relocation] = &resolved;
        const INLINE: usize = 16;
        let mut inline = [gpu::KernelArg::U32(0); INLINE];
        let mut spilled = Vec::new();
        let lifted: &mut [gpu::KernelArg<'_>] = if args.len() <= INLINE {
            &mut inline[..args.len()]
        } else {
            spilled.resize(args.len(), gpu::KernelArg::U32(0));
            &mut spilled
        };
        for (slot, arg) in lifted.iter_mut().zip(args) {
            *slot = lift(self, arg, &mut rest)?;
        }
        launch(self, lifted)
    }
}

/// What both versions' sessions, buffers and modules share, for version `$v`: the methods of
/// `HostSession` common to all versions (inside its impl), `HostBuffer`, and the lifting of
/// launch arguments and configurations.
macro_rules! session_common {
    (lift $v:ident) => {
        session_common!(lift $v, state, _relocations => {});
    };
    // `$more`: the arms of the version's own argument cases, which may use `$state` and take
    // their relocations from `$relocations`.
    (lift $v:ident, $state:ident, $relocations:ident => { $($more:tt)* }) => {
        /// A version's launch argument as the service takes it.
        fn lift_arg<'x>(
            $state: &GpuState<'_>,
            arg: &'x crate::wit::bindings::$v::tasklet::gpu::sessions::KernelArg,
            $relocations: &mut &'x [gpu::Relocation],
        ) -> GpuResult<gpu::KernelArg<'x>> {
            use crate::wit::bindings::$v::tasklet::gpu::sessions::KernelArg;
            Ok(match arg {
                KernelArg::Buffer(b) => gpu::KernelArg::Buffer {
                    buffer: $state.buffer_id(&b.buffer)?,
                    offset: b.offset,
                },
                KernelArg::I32(v) => gpu::KernelArg::I32(*v),
                KernelArg::U32(v) => gpu::KernelArg::U32(*v),
                KernelArg::I64(v) => gpu::KernelArg::I64(*v),
                KernelArg::U64(v) => gpu::KernelArg::U64(*v),
                KernelArg::F32(v) => gpu::KernelArg::F32(*v),
                KernelArg::F64(v) => gpu::KernelArg::F64(*v),
                KernelArg::Bytes(v) => gpu::KernelArg::Bytes(v),
                $($more)*
            })
        }

        fn lift_config(
            c: &crate::wit::bindings::$v::tasklet::gpu::sessions::LaunchConfig,
        ) -> gpu::LaunchConfig {
            let (g, b) = (c.grid, c.block);
            gpu::LaunchConfig {
                grid: [g.0, g.1, g.2],
                block: [b.0, b.1, b.2],
                shared_mem_bytes: c.shared_mem_bytes,
            }
        }

        impl crate::wit::bindings::$v::tasklet::gpu::sessions::HostBuffer for GpuState<'_> {
            fn size(&mut self, this: Resource<BufferHandle>) -> wasmtime::Result<u64> {
                Ok(self.table.get(&this)?.size)
            }

            fn drop(&mut self, this: Resource<BufferHandle>) -> wasmtime::Result<()> {
                let b = self.table.delete(this)?;
                self.service.mem_free(b.session, b.id);
                Ok(())
            }
        }
    };
    (session) => {
        fn open(&mut self, lease: Resource<LeaseHandle>) -> GpuResult<Resource<SessionHandle>> {
            let lease = self.table.get(&lease)?.id;
            let id = self.service.session_open(lease)?;
            Ok(self.table.push(SessionHandle { id })?)
        }

        fn mem_alloc(
            &mut self,
            this: Resource<SessionHandle>,
            bytes: u64,
        ) -> GpuResult<Resource<BufferHandle>> {
            let session = self.session_id(&this)?;
            let id = self.service.mem_alloc(session, bytes)?;
            Ok(self.table.push(BufferHandle {
                id,
                session,
                size: bytes,
            })?)
        }

        fn mem_write(
            &mut self,
            this: Resource<SessionHandle>,
            dst: Resource<BufferHandle>,
            offset: u64,
            data: Vec<u8>,
        ) -> GpuResult<()> {
            // Reached only for a lifted copy of the data: the linker routes `mem-write` through
            // `mem_write_list`, which sees the guest's list in place.
            let (session, buffer) = (self.session_id(&this)?, self.buffer_id(&dst)?);
            Ok(self.service.mem_write(session, buffer, offset, &data)?)
        }

        fn mem_read_into(
            &mut self,
            _this: Resource<SessionHandle>,
            _src: Resource<BufferHandle>,
            _offset: u64,
            _dst: Vec<u8>,
        ) -> GpuResult<()> {
            // The linker routes `mem-read-into` through `mem_read_into_list`, which sees the
            // guest's list in place; a lifted copy cannot be filled in place.
            Err(crate::error::unsupported(
                "mem-read-into needs the host to see the destination in place, and this host was linked without \
                 that; use mem-read",
            )
            .into())
        }

        fn mem_read(
            &mut self,
            this: Resource<SessionHandle>,
            src: Resource<BufferHandle>,
            offset: u64,
            len: u64,
        ) -> GpuResult<Vec<u8>> {
            let (session, buffer) = (self.session_id(&this)?, self.buffer_id(&src)?);
            Ok(self.service.mem_read(session, buffer, offset, len)?)
        }

        fn mem_copy(
            &mut self,
            this: Resource<SessionHandle>,
            dst: Resource<BufferHandle>,
            dst_offset: u64,
            src: Resource<BufferHandle>,
            src_offset: u64,
            len: u64,
        ) -> GpuResult<()> {
            let session = self.session_id(&this)?;
            let (dst, src) = (self.buffer_id(&dst)?, self.buffer_id(&src)?);
            Ok(self
                .service
                .mem_copy(session, (dst, dst_offset), (src, src_offset), len)?)
        }

        fn module_load(
            &mut self,
            this: Resource<SessionHandle>,
            ptx: String,
        ) -> GpuResult<Resource<ModuleHandle>> {
            let session = self.session_id(&this)?;
            let id = self.service.module_load(session, &ptx)?;
            self.add_module(session, id)
        }

        fn module_load_source(
            &mut self,
            this: Resource<SessionHandle>,
            source: String,
            options: Vec<String>,
        ) -> GpuResult<Resource<ModuleHandle>> {
            let session = self.session_id(&this)?;
            let id = self
                .service
                .module_load_source(session, &source, &options)?;
            self.add_module(session, id)
        }

        fn sync(&mut self, this: Resource<SessionHandle>) -> GpuResult<()> {
            let session = self.session_id(&this)?;
            Ok(self.service.sync(session)?)
        }

        fn drop(&mut self, this: Resource<SessionHandle>) -> wasmtime::Result<()> {
            let id = self.table.delete(this)?.id;
            self.service.session_drop(id);
            Ok(())
        }
    };
}

/// Contract 0.1.
mod v01 {
    use super::*;
    use crate::wit::bindings::v01::tasklet::gpu::sessions::{
        Host, HostModule, HostSession, KernelArg, LaunchConfig,
    };

    session_common!(lift v01);

    impl Host for GpuState<'_> {}

    impl HostSession for GpuState<'_> {
        session_common!(session);

        fn launch(
            &mut self,
            this: Resource<SessionHandle>,
            module: Resource<ModuleHandle>,
            kernel: String,
            config: LaunchConfig,
            args: Vec<KernelArg>,
        ) -> GpuResult<()> {
            let session = self.session_id(&this)?;
            let module = self.table.get(&module)?.id;
            let config = lift_config(&config);
            self.with_args(
                &args,
                |_, _, _| Ok(()),
                lift_arg,
                |s, args| Ok(s.service.launch(session, module, &kernel, &config, args)?),
            )
        }
    }

    impl HostModule for GpuState<'_> {
        fn kernels(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<Vec<String>> {
            let m = self.table.get(&this)?;
            let (session, id) = (m.session, m.id);
            Ok(self.service.module_kernels(session, id))
        }

        fn drop(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<()> {
            let m = self.table.delete(this)?;
            self.service.module_unload(m.session, m.id);
            Ok(())
        }
    }
}

/// Contract 0.2: 0.1's, with kernel handles, signatures and launch ordinals.
mod v02 {
    use super::*;

    mod actors;
    mod streams;
    use crate::wit::bindings::v02::tasklet::gpu::sessions::{
        BurstArg, GraphArg, Host, HostGraph, HostKernel, HostModule, HostSession, KernelArg,
        KernelParam, KernelSignature, LaunchConfig, ParamKind,
    };

    impl GpuState<'_> {
        /// A kernel handle's module and place, refused unless its module is `session`'s (the
        /// service checks the module against the session too).
        fn kernel_of(
            &self,
            session: gpu::SessionId,
            kernel: &Resource<KernelHandle>,
        ) -> GpuResult<(gpu::ModuleId, u32)> {
            let k = self.table.get(kernel)?;
            if k.session != session {
                return Err(crate::error::invalid(
                    "the kernel is of a module of another session; resolve it from a module of this one",
                )
                .into());
            }
            Ok((k.module, k.index))
        }
    }

    session_common!(lift v02, state, relocations => {
        KernelArg::Relocated(r) => {
            let Some((own, rest)) = relocations.split_at_checked(r.relocations.len()) else {
                return Err(GpuFailure::Trap(wasmtime::Error::msg(
                    "a launch's relocations were not all resolved",
                )));
            };
            *relocations = rest;
            gpu::KernelArg::Relocated {
                bytes: &r.bytes,
                relocations: own,
            }
        }
    });

    /// The relocations of a relocated-bytes argument, their buffers resolved, appended to `out`.
    fn relocations(
        state: &GpuState<'_>,
        arg: &KernelArg,
        out: &mut Vec<gpu::Relocation>,
    ) -> GpuResult<()> {
        if let KernelArg::Relocated(r) = arg {
            for reloc in &r.relocations {
                out.push(gpu::Relocation {
                    at: reloc.at,
                    buffer: state.buffer_id(&reloc.buffer)?,
                    offset: reloc.offset,
                });
            }
        }
        Ok(())
    }

    fn param(p: &gpu::KernelParam) -> KernelParam {
        KernelParam {
            name: p.name.clone(),
            size: p.size,
            align: p.align,
            kind: match p.kind {
                gpu::ParamKind::Pointer => ParamKind::Pointer,
                gpu::ParamKind::Value => ParamKind::Value,
            },
        }
    }

    impl Host for GpuState<'_> {}

    impl HostSession for GpuState<'_> {
        session_common!(session);

        fn mem_copy_from(
            &mut self,
            this: Resource<SessionHandle>,
            dst: Resource<BufferHandle>,
            dst_offset: u64,
            src_session: Resource<SessionHandle>,
            src: Resource<BufferHandle>,
            src_offset: u64,
            len: u64,
        ) -> GpuResult<()> {
            let session = self.session_id(&this)?;
            let from = self.session_id(&src_session)?;
            let (dst, src) = (self.buffer_id(&dst)?, self.buffer_id(&src)?);
            Ok(self.service.mem_copy_between(
                (session, dst, dst_offset),
                (from, src, src_offset),
                len,
            )?)
        }

        fn launch(
            &mut self,
            this: Resource<SessionHandle>,
            module: Resource<ModuleHandle>,
            kernel: String,
            config: LaunchConfig,
            args: Vec<KernelArg>,
        ) -> GpuResult<u64> {
            let session = self.session_id(&this)?;
            let module = self.table.get(&module)?.id;
            let config = lift_config(&config);
            self.with_args(&args, relocations, lift_arg, |s, args| {
                let kernel = gpu::KernelRef::Named(&kernel);
                Ok(s.service
                    .launch_kernel(session, module, kernel, &config, args)?)
            })
        }

        fn launch_kernel(
            &mut self,
            this: Resource<SessionHandle>,
            kernel: Resource<KernelHandle>,
            config: LaunchConfig,
            args: Vec<KernelArg>,
        ) -> GpuResult<u64> {
            let session = self.session_id(&this)?;
            let (module, index) = self.kernel_of(session, &kernel)?;
            let config = lift_config(&config);
            self.with_args(&args, relocations, lift_arg, |s, args| {
                Ok(s.service.launch_kernel(
                    session,
                    module,
                    gpu::KernelRef::At(index),
                    &config,
                    args,
                )?)
            })
        }

        fn launch_burst(
            &mut self,
            this: Resource<SessionHandle>,
            kernel: Resource<KernelHandle>,
            config: LaunchConfig,
            args: Vec<KernelArg>,
            launches: Vec<Vec<BurstArg>>,
        ) -> GpuResult<u64> {
            // An oversized burst is refused before any of it is resolved or lifted.
            gpu::check_burst_size(launches.len(), launches.iter().map(Vec::len).sum())?;
            let session = self.session_id(&this)?;
            let (module, index) = self.kernel_of(session, &kernel)?;
            let config = lift_config(&config);
            // Every relocation resolved first, in argument order: the burst's arguments, then
            // each launch's changes; each lifted argument takes its share.
            let mut resolved = Vec::new();
            for arg in args.iter().chain(launches.iter().flatten().map(|c| &c.arg)) {
                relocations(self, arg, &mut resolved)?;
            }
            let mut rest: &[gpu::Relocation] = &resolved;
            let lifted = args
                .iter()
                .map(|a| lift_arg(self, a, &mut rest))
                .collect::<GpuResult<Vec<_>>>()?;
            let mut changes = Vec::new();
            let mut counts = Vec::with_capacity(launches.len());
            for launch in &launches {
                counts.push(launch.len() as u32);
                for c in launch {
                    changes.push(gpu::BurstArg {
                        index: c.index,
                        arg: lift_arg(self, &c.arg, &mut rest)?,
                    });
                }
            }
            let burst = gpu::Burst {
                config,
                args: &lifted,
                changes: &changes,
                counts: &counts,
            };
            Ok(self
                .service
                .launch_burst(session, module, gpu::KernelRef::At(index), &burst)?)
        }

        fn new_graph(&mut self, this: Resource<SessionHandle>) -> GpuResult<Resource<GraphHandle>> {
            let session = self.session_id(&this)?;
            let id = self.service.graph_create(session)?;
            Ok(self.table.push(GraphHandle { id, session })?)
        }

        fn new_stream(
            &mut self,
            this: Resource<SessionHandle>,
        ) -> GpuResult<Resource<crate::wit::StreamHandle>> {
            self.new_stream_of(&this)
        }

        fn new_event(
            &mut self,
            this: Resource<SessionHandle>,
        ) -> GpuResult<Resource<crate::wit::EventHandle>> {
            self.new_event_of(&this)
        }

        fn new_ring(
            &mut self,
            this: Resource<SessionHandle>,
            direction: crate::wit::bindings::v02::tasklet::gpu::sessions::RingDirection,
            message_size: u32,
            capacity: u32,
        ) -> GpuResult<Resource<crate::wit::RingHandle>> {
            self.new_ring_of(
                &this,
                direction,
                gpu::RingLayout::Plain,
                message_size,
                capacity,
            )
        }

        fn new_sequenced_ring(
            &mut self,
            this: Resource<SessionHandle>,
            direction: crate::wit::bindings::v02::tasklet::gpu::sessions::RingDirection,
            message_size: u32,
            capacity: u32,
        ) -> GpuResult<Resource<crate::wit::RingHandle>> {
            self.new_ring_of(
                &this,
                direction,
                gpu::RingLayout::Sequenced,
                message_size,
                capacity,
            )
        }

        fn launch_persistent(
            &mut self,
            this: Resource<SessionHandle>,
            kernel: Resource<KernelHandle>,
            config: LaunchConfig,
            args: Vec<crate::wit::bindings::v02::tasklet::gpu::sessions::ActorArg>,
        ) -> GpuResult<Resource<crate::wit::ActorHandle>> {
            self.launch_persistent_of(&this, &kernel, &config, &args)
        }
    }

    impl GpuState<'_> {
        /// A graph's ids.
        fn graph_of(
            &self,
            graph: &Resource<GraphHandle>,
        ) -> GpuResult<(gpu::SessionId, gpu::GraphId)> {
            let g = self.table.get(graph)?;
            Ok((g.session, g.id))
        }

        /// Lifts a graph launch's arguments (relocations resolved first, as for a launch) and
        /// calls `record` with them.
        fn with_graph_args<R>(
            &mut self,
            args: &[GraphArg],
            record: impl FnOnce(&mut Self, &[gpu::GraphArg<'_>]) -> GpuResult<R>,
        ) -> GpuResult<R> {
            let mut resolved = Vec::new();
            for arg in args {
                if let GraphArg::Arg(a) = arg {
                    relocations(self, a, &mut resolved)?;
                }
            }
            let mut rest: &[gpu::Relocation] = &resolved;
            let mut lifted = Vec::with_capacity(args.len());
            for arg in args {
                lifted.push(match arg {
                    GraphArg::Arg(a) => gpu::GraphArg::Arg(lift_arg(self, a, &mut rest)?),
                    GraphArg::Scalar(k) => gpu::GraphArg::Scalar(*k),
                });
            }
            record(self, &lifted)
        }
    }

    impl HostGraph for GpuState<'_> {
        fn launch(
            &mut self,
            this: Resource<GraphHandle>,
            kernel: Resource<KernelHandle>,
            config: LaunchConfig,
            args: Vec<GraphArg>,
        ) -> GpuResult<u32> {
            let (session, graph) = self.graph_of(&this)?;
            let (module, index) = self.kernel_of(session, &kernel)?;
            let config = lift_config(&config);
            self.with_graph_args(&args, |s, args| {
                let kernel = gpu::KernelRef::At(index);
                Ok(s.service
                    .graph_launch(session, graph, module, kernel, &config, args)?)
            })
        }

        fn copy(
            &mut self,
            this: Resource<GraphHandle>,
            dst: Resource<BufferHandle>,
            dst_offset: u64,
            src: Resource<BufferHandle>,
            src_offset: u64,
            len: u64,
        ) -> GpuResult<u32> {
            let (session, graph) = self.graph_of(&this)?;
            let (dst, src) = (self.buffer_id(&dst)?, self.buffer_id(&src)?);
            Ok(self.service.graph_copy(
                session,
                graph,
                (dst, dst_offset),
                (src, src_offset),
                len,
            )?)
        }

        fn fill(
            &mut self,
            this: Resource<GraphHandle>,
            dst: Resource<BufferHandle>,
            offset: u64,
            len: u64,
            value: u32,
        ) -> GpuResult<u32> {
            let (session, graph) = self.graph_of(&this)?;
            let dst = self.buffer_id(&dst)?;
            Ok(self
                .service
                .graph_fill(session, graph, (dst, offset), len, value)?)
        }

        fn scalar(&mut self, this: Resource<GraphHandle>, value: u64) -> GpuResult<u32> {
            let (session, graph) = self.graph_of(&this)?;
            Ok(self.service.graph_scalar(session, graph, value)?)
        }

        fn set_scalar(
            &mut self,
            this: Resource<GraphHandle>,
            index: u32,
            value: u64,
        ) -> GpuResult<()> {
            let (session, graph) = self.graph_of(&this)?;
            Ok(self
                .service
                .graph_set_scalar(session, graph, index, value)?)
        }

        fn set_args(
            &mut self,
            this: Resource<GraphHandle>,
            node: u32,
            args: Vec<GraphArg>,
        ) -> GpuResult<()> {
            let (session, graph) = self.graph_of(&this)?;
            self.with_graph_args(&args, |s, args| {
                Ok(s.service.graph_set_args(session, graph, node, args)?)
            })
        }

        fn replay(&mut self, this: Resource<GraphHandle>, times: u32) -> GpuResult<()> {
            let (session, graph) = self.graph_of(&this)?;
            Ok(self.service.graph_replay(session, graph, times)?)
        }

        fn drop(&mut self, this: Resource<GraphHandle>) -> wasmtime::Result<()> {
            let g = self.table.delete(this)?;
            self.service.graph_drop(g.session, g.id);
            Ok(())
        }
    }

    impl HostModule for GpuState<'_> {
        fn kernels(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<Vec<String>> {
            let m = self.table.get(&this)?;
            let (session, id) = (m.session, m.id);
            Ok(self.service.module_kernels(session, id))
        }

        fn signatures(
            &mut self,
            this: Resource<ModuleHandle>,
        ) -> wasmtime::Result<Vec<KernelSignature>> {
            let m = self.table.get(&this)?;
            let (session, id) = (m.session, m.id);
            Ok(self
                .service
                .module_signatures(session, id)
                .iter()
                .map(|k| KernelSignature {
                    name: k.name.clone(),
                    params: k.params.iter().map(param).collect(),
                })
                .collect())
        }

        fn kernel(
            &mut self,
            this: Resource<ModuleHandle>,
            name: String,
        ) -> GpuResult<Resource<KernelHandle>> {
            let m = self.table.get(&this)?;
            let (session, module) = (m.session, m.id);
            let signatures = self.service.module_signatures(session, module);
            let Some(index) = signatures.iter().position(|k| k.name == name) else {
                let names: Vec<&str> = signatures.iter().map(|k| k.name.as_str()).collect();
                let asked = format!("no kernel named {}", crate::error::quoted(&name));
                return Err(crate::error::no_such_kernel(&asked, &names).into());
            };
            let mut signatures = signatures;
            let signature = signatures.swap_remove(index);
            Ok(self.table.push(KernelHandle {
                module,
                session,
                index: index as u32,
                signature,
            })?)
        }

        fn reload(&mut self, this: Resource<ModuleHandle>, ptx: String) -> GpuResult<()> {
            let m = self.table.get(&this)?;
            let (session, module) = (m.session, m.id);
            let source = gpu::ModuleSource::Ptx(&ptx);
            let new = self.service.module_reload(session, module, source)?;
            self.table.get_mut(&this)?.id = new;
            Ok(())
        }

        fn reload_source(
            &mut self,
            this: Resource<ModuleHandle>,
            source: String,
            options: Vec<String>,
        ) -> GpuResult<()> {
            let m = self.table.get(&this)?;
            let (session, module) = (m.session, m.id);
            let source = gpu::ModuleSource::Cuda {
                source: &source,
                options: &options,
            };
            let new = self.service.module_reload(session, module, source)?;
            self.table.get_mut(&this)?.id = new;
            Ok(())
        }

        fn drop(&mut self, this: Resource<ModuleHandle>) -> wasmtime::Result<()> {
            let m = self.table.delete(this)?;
            self.service.module_unload(m.session, m.id);
            Ok(())
        }
    }

    impl HostKernel for GpuState<'_> {
        fn name(&mut self, this: Resource<KernelHandle>) -> wasmtime::Result<String> {
            Ok(self.table.get(&this)?.signature.name.clone())
        }

        fn params(&mut self, this: Resource<KernelHandle>) -> wasmtime::Result<Vec<KernelParam>> {
            Ok(self
                .table
                .get(&this)?
                .signature
                .params
                .iter()
                .map(param)
                .collect())
        }

        fn drop(&mut self, this: Resource<KernelHandle>) -> wasmtime::Result<()> {
            self.table.delete(this)?;
            Ok(())
        }
    }
}

/// `mem-write` with its data seen in place in guest memory (a `WasmList`, not a lifted copy): the
/// service may then move a large span between linear memory and the device in one copy.
pub(crate) fn mem_write_list<T>(
    mut store: StoreContextMut<'_, T>,
    get: fn(&mut T) -> GpuState<'_>,
    this: Resource<SessionHandle>,
    dst: Resource<BufferHandle>,
    offset: u64,
    data: WasmList<u8>,
) -> GpuResult<()> {
    let (ptr, len) = {
        let bytes = data.as_le_slice(&store);
        (bytes.as_ptr(), bytes.len())
    };
    let gpu = get(store.data_mut());
    let (session, buffer) = (gpu.session_id(&this)?, gpu.buffer_id(&dst)?);
    // SAFETY: the bytes are the guest's list, live in its memory for the whole host call (no guest
    // code runs meanwhile, and nothing in this call writes to them); the slice is rebuilt here
    // only because the store had to be borrowed mutably for the service in between.
    let data = unsafe { std::slice::from_raw_parts(ptr, len) };
    Ok(gpu.service.mem_write(session, buffer, offset, data)?)
}

/// `mem-read-into`: fills the guest's list in place. The checks are `mem-read`'s.
pub(crate) fn mem_read_into_list<T>(
    mut store: StoreContextMut<'_, T>,
    get: fn(&mut T) -> GpuState<'_>,
    this: Resource<SessionHandle>,
    src: Resource<BufferHandle>,
    offset: u64,
    dst: WasmList<u8>,
) -> GpuResult<()> {
    let (addr, len) = {
        let bytes = dst.as_le_slice(&store);
        (bytes.as_ptr() as usize, bytes.len())
    };
    // SAFETY: we are in a host call of the store that owns the memory, so no guest code runs, and
    // the slice above is dead: nothing holds a reference into those bytes.
    let dst = unsafe { GuestBytes::new(addr, len) };
    let gpu = get(store.data_mut());
    let (session, buffer) = (gpu.session_id(&this)?, gpu.buffer_id(&src)?);
    let r = gpu.service.mem_read_into(session, buffer, offset, dst);
    r.map_err(GpuFailure::from)
}
