//! The one place `tasklet:gpu` bindings are generated. Resources map to the host's handle types;
//! every import may trap (a broken host invariant), and `gpu-error` results map to `GpuFailure`.

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
    },
});

/// Re-registers the two imports whose `list<u8>` must be seen in place in guest memory, over what
/// the generated `add_to_linker` registered for them.
///
/// The generated bindings lift every list into a `Vec`: for `mem-write` that is a copy of the
/// guest's data (256 MiB for a bulk write) before the worker copies it again, and `mem-read-into`
/// must fill the guest's own bytes, which a lifted copy cannot do. bindgen has no per-function
/// switch for that, so these two are registered by hand with the list as a
/// `wasmtime::component::WasmList<u8>` (a view into guest memory), shadowing the generated ones.
/// Everything else of `tasklet:gpu` stays generated; the generated `HostSession::mem_write`
/// remains the copy path `mem_write_list` falls back to. The parameter tuples are the generated
/// ones with `WasmList<u8>` for `list<u8>`, so the linker's type check holds them to the WIT.
pub fn add_list_views_to_linker<T: 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> crate::wit::GpuState<'_>,
) -> wasmtime::Result<()> {
    use crate::wit::{sessions, BufferHandle, GpuFailure, GpuResult, SessionHandle};
    use tasklet::gpu::types::GpuError;
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
            Err(GpuFailure::Gpu(e)) => Ok((Err(e),)),
            Err(GpuFailure::Trap(t)) => Err(t),
        }
    }

    linker.allow_shadowing(true);
    let mut inst = linker.instance("tasklet:gpu/sessions@0.1.0")?;
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
    linker.allow_shadowing(false);
    Ok(())
}
