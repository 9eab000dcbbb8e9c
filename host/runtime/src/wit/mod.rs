//! `tasklet:gpu` for wasm guests: the generated bindings of every contract version the host
//! serves (0.1 and 0.2), one module per interface, each mapping the guest's resource handles to
//! the ids of a [`GpuService`] and its errors back to `gpu-error`. Both versions' handles are the
//! same host types over the same service, so a component of either runs on one implementation.
//! The checks themselves are the service's; this layer only holds the handles.

pub(crate) mod bindings;
pub mod error;
mod inventory;
mod leases;
mod oneshot;
pub(crate) mod sessions;

pub use error::{GpuFailure, GpuResult};

use crate::gpu::{BufferId, GpuService, GraphId, LeaseId, ModuleId, SessionId};
use wasmtime::component::{HasData, ResourceTable};

/// The guest's handle types as stored in the resource table: the service's ids, and what the
/// guest may ask of a handle without a call into the service.
pub struct LeaseHandle {
    id: LeaseId,
}
pub struct SessionHandle {
    id: SessionId,
}
pub struct BufferHandle {
    id: BufferId,
    session: SessionId,
    size: u64,
}
pub struct ModuleHandle {
    id: ModuleId,
    session: SessionId,
}
/// A kernel resolved from a module (contract 0.2): its place in the module's list, and its
/// signature for the guest to read without a call into the service.
pub struct KernelHandle {
    module: ModuleId,
    session: SessionId,
    index: u32,
    signature: crate::gpu::KernelSignature,
}

/// A graph of a session (contract 0.2).
pub struct GraphHandle {
    id: GraphId,
    session: SessionId,
}

/// A stream of a session (contract 0.2).
pub struct StreamHandle {
    id: crate::gpu::StreamId,
    session: SessionId,
}

/// An event of a session (contract 0.2).
pub struct EventHandle {
    id: crate::gpu::EventId,
    session: SessionId,
}

/// A ring of a session (contract 0.2), with its geometry for the guest to read without a call.
pub struct RingHandle {
    id: crate::gpu::RingId,
    session: SessionId,
    message_size: u32,
    capacity: u32,
}

/// A persistent kernel of a session (contract 0.2).
pub struct ActorHandle {
    id: crate::gpu::ActorId,
    session: SessionId,
}

/// Reaches the GPU service and the resource table from a store's data.
pub trait GpuView: Send {
    fn gpu(&mut self) -> GpuState<'_>;
}

/// The borrowed halves the host functions work on.
pub struct GpuState<'a> {
    pub service: &'a mut dyn GpuService,
    pub table: &'a mut ResourceTable,
}

/// `HasData` marker for the generated `add_to_linker`.
pub struct Gpu;

impl HasData for Gpu {
    type Data<'a> = GpuState<'a>;
}

/// Adds `tasklet:gpu` to a linker whose store data implements [`GpuView`].
pub fn add_to_linker<T: GpuView + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
) -> wasmtime::Result<()> {
    fn get<T: GpuView>(t: &mut T) -> GpuState<'_> {
        t.gpu()
    }
    bindings::v01::Tasklet::add_to_linker::<T, Gpu>(linker, get)?;
    bindings::v02::Tasklet::add_to_linker::<T, Gpu>(linker, get)?;
    // mem-write and mem-read-into see their lists in place in guest memory (see there why).
    bindings::add_list_views_to_linker(linker, get::<T>)?;
    Ok(())
}
