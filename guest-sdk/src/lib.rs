pub mod raw {
    wit_bindgen::generate!({
        path: "../wit",
        world: "tasklet",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "tasklet_gpu::raw",
        runtime_path: "tasklet_gpu::__wit_bindgen",
        generate_all,
        debug: true,
    });
}
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;
