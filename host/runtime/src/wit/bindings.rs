//! The one place `tasklet:gpu` bindings are generated, once per contract version the host serves
//! (`v01`: `wit/0.1/gpu.wit`; `v02`: `wit/gpu.wit`). Resources of both map to the same host
//! handle types, so one implementation underneath serves both; every import may trap (a broken
//! host invariant), and `gpu-error` results map to `GpuFailure`.

pub mod v01 {
    wasmtime::component::bindgen!({
        path: "../../wit/0.1",
        world: "tasklet",
        imports: { default: trappable },
        trappable_error_type: {
            "tasklet:gpu/types.gpu-error" => crate::wit::GpuFailure,
        },
        with: {
            "tasklet:gpu/leases.lease": crate::wit::LeaseHandle,
            "tasklet:gpu/sessions.session": crate::wit::SessionHandle,
            "tasklet:gpu/sessions.buffer": crate::wit::BufferHandle,
            "tasklet:gpu/sessions.module": crate::wit::ModuleHandle,
        },
    });
}

pub mod v02 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "tasklet",
        imports: { default: trappable },
        trappable_error_type: {
            "tasklet:gpu/types.gpu-error" => crate::wit::GpuFailure,
        },
        with: {
            "tasklet:gpu/leases.lease": crate::wit::LeaseHandle,
            "tasklet:gpu/sessions.session": crate::wit::SessionHandle,
            "tasklet:gpu/sessions.buffer": crate::wit::BufferHandle,
            "tasklet:gpu/sessions.module": crate::wit::ModuleHandle,
            "tasklet:gpu/sessions.kernel": crate::wit::KernelHandle,
            "tasklet:gpu/sessions.graph": crate::wit::GraphHandle,
            "tasklet:gpu/sessions.gpu-stream": crate::wit::StreamHandle,
            "tasklet:gpu/sessions.event": crate::wit::EventHandle,
            "tasklet:gpu/sessions.ring": crate::wit::RingHandle,
            "tasklet:gpu/sessions.actor": crate::wit::ActorHandle,
        },
    });
}

/// Re-registers the two imports whose `list<u8>` must be seen in place in guest memory, over what
/// the generated `add_to_linker` registered for them, in the sessions interface of version `$v`
/// (instance `$instance`).
///
/// The generated bindings lift every list into a `Vec`: for `mem-write` that is a copy of the
/// guest's data (256 MiB for a bulk write) before the worker copies it again, and `mem-read-into`
/// must fill the guest's own bytes, which a lifted copy cannot do. bindgen has no per-function
/// switch for that, so these two are registered by hand with the list as a
/// `wasmtime::component::WasmList<u8>` (a view into guest memory), shadowing the generated ones.
/// Everything else of `tasklet:gpu` stays generated; the generated `HostSession::mem_write`
/// remains the copy path `mem_write_list` falls back to. The parameter tuples are the generated
/// ones with `WasmList<u8>` for `list<u8>`, so the linker's type check holds them to the WIT.
macro_rules! add_list_views {
    ($linker:expr, $get:expr, $instance:literal, $v:ident) => {{
        use crate::wit::bindings::$v::tasklet::gpu::types::GpuError;
        use crate::wit::{sessions, BufferHandle, GpuFailure, GpuResult, SessionHandle};
        use wasmtime::component::{Resource, WasmList};

        type Args = (
            Resource<SessionHandle>,
            Resource<BufferHandle>,
            u64,
            WasmList<u8>,
        );
        // A `gpu-error` goes back to the guest; a trap (a broken host invariant) ends it.
        fn lower(r: GpuResult<()>) -> wasmtime::Result<(Result<(), GpuError>,)> {
            match r {
                Ok(()) => Ok((Ok(()),)),
                Err(GpuFailure::Gpu(e)) => Ok((Err(e.into()),)),
                Err(GpuFailure::Trap(t)) => Err(t),
            }
        }
        let get = $get;
        $linker.allow_shadowing(true);
        let mut inst = $linker.instance($instance)?;
        inst.func_wrap(
            "[method]session.mem-write",
            move |store, (this, dst, offset, data): Args| {
                lower(sessions::mem_write_list(
                    store, get, this, dst, offset, data,
                ))
            },
        )?;
        inst.func_wrap(
            "[method]session.mem-read-into",
            move |store, (this, src, offset, dst): Args| {
                lower(sessions::mem_read_into_list(
                    store, get, this, src, offset, dst,
                ))
            },
        )?;
        $linker.allow_shadowing(false);
    }};
}

/// [`add_list_views`] for both versions.
pub fn add_list_views_to_linker<T: 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> crate::wit::GpuState<'_>,
) -> wasmtime::Result<()> {
    add_list_views!(linker, get, "tasklet:gpu/sessions@0.1.0", v01);
    add_list_views!(linker, get, "tasklet:gpu/sessions@0.2.0", v02);
    Ok(())
}

/// The world's export (`run`) is the same in every version, so one typed pre-instance serves a
/// component of either: the linker holds both versions' imports.
pub use v02::TaskletPre;
