//! The one place `tasklet:gpu` bindings are generated. Resources map to the host's handle types;
//! every import may trap (a broken host invariant), and `gpu-error` results map to `GpuFailure`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "tasklet",
    imports: { default: trappable },
    trappable_error_type: {
        "tasklet:gpu/types.gpu-error" => crate::gpu::GpuFailure,
    },
    with: {
        "tasklet:gpu/leases.lease": crate::gpu::LeaseHandle,
        "tasklet:gpu/sessions.session": crate::gpu::SessionHandle,
        "tasklet:gpu/sessions.buffer": crate::gpu::BufferHandle,
        "tasklet:gpu/sessions.module": crate::gpu::ModuleHandle,
    },
});
