//! Guest-side SDK for **tasklets**: WebAssembly components (`wasm32-wasip2`) that use GPUs through
//! the host's `tasklet:gpu@0.2.0` interface (hosts serve 0.1 too, so tasklets built with the SDK's
//! 0.1 keep running).
//!
//! A tasklet is one function from input bytes to output bytes, exported with [`export!`]:
//!
//! ```no_run
//! fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
//!     Ok(input)
//! }
//!
//! tasklet_gpu::export!(run);
//! ```
//!
//! Inside it, the GPU is reached through a small set of handles, each tied to the one before it by
//! a Rust lifetime, so that nothing can outlive what it was made under:
//!
//! * a [`Lease`] grants device memory for a time ([`Lease::builder`]);
//! * a [`Session`] is opened on a lease ([`Lease::session`]) and holds
//! * typed device memory, [`DeviceBuffer<T>`](DeviceBuffer) ([`Session::alloc`],
//!   [`Session::alloc_from`]), and loaded kernels, [`Module`] ([`Session::load_ptx`],
//!   [`Session::load_cuda`]);
//! * kernels run through a [`Launch`] builder ([`Session::launch`], or [`Session::launch_kernel`]
//!   for a [`Kernel`] resolved once with [`Module::kernel`]), whose by-value struct arguments are
//!   `#[derive(Pod)]` structs ([`Pod`]) or built in C layout ([`CStruct`]);
//! * many launches of one kernel, each changing some arguments, go in one host call as a
//!   [`Burst`] ([`Session::burst`]);
//! * a sequence of launches, copies and fills is recorded once and replayed as a [`Graph`]
//!   ([`Session::graph`]), with device scalars ([`Graph::scalar`]) set between replays;
//! * a module's code is replaced in place, its buffers kept, with [`Module::reload_ptx`].
//!
//! Offsets into buffers are in elements throughout; a name says `byte` where a value is in bytes.
//!
//! ```no_run
//! use tasklet_gpu::{Lease, LaunchConfig};
//!
//! const PTX: &str = "..."; // e.g. include_str!("../kernels/iota.ptx")
//!
//! fn iota(n: u32) -> Result<Vec<u32>, tasklet_gpu::Error> {
//!     let lease = Lease::builder().min_vram_for::<u32>(n as usize).acquire()?;
//!     let session = lease.session()?;
//!     let out = session.alloc::<u32>(n as usize)?;
//!     let module = session.load_ptx(PTX)?;
//!     session
//!         .launch(&module, "iota")
//!         .config(LaunchConfig::for_num_elems(n))
//!         .arg(&out)
//!         .arg(n)
//!         .run()?;
//!     session.sync()?;
//!     out.read()
//! }
//! ```
//!
//! For the common *pure function* shape (data in, one kernel over it, data out) [`GpuCall`] does
//! the lease, copies and launch in one expression, as one host call (where the GPU is on a node,
//! one request):
//!
//! ```no_run
//! # const PTX: &str = "";
//! # fn f(xs: &[f32], factor: f32) -> Result<Vec<f32>, tasklet_gpu::Error> {
//! let scaled: Vec<f32> = tasklet_gpu::GpuCall::new(PTX, "scale")
//!     .data()        // the device buffer holding `xs`
//!     .arg(factor)
//!     .len_arg()     // xs.len() as a u32
//!     .run(xs)?;
//! # Ok(scaled) }
//! ```
//!
//! [`input`] reads the input bytes in the usual shapes (a count, a list of numbers, a command and
//! its argument), with errors that name the word that did not parse.
//!
//! Errors are [`Error`]s: one case per WIT `gpu-error` case, plus [`Error::InvalidInput`] for
//! mistakes the SDK catches before calling the host. `Error` converts into `String`, so `?` works
//! in a `run` function that returns `Result<_, String>`.
//!
//! The generated bindings themselves are in [`raw`], for uses the typed API deliberately forbids
//! (the host's test tasklets use it to misuse handles on purpose).

#![warn(missing_docs)]

// The generated bindings name this crate by its path, so that tasklets need no direct dependency
// on `wit-bindgen`; inside the crate that path must resolve too.
extern crate self as tasklet_gpu;

mod actor;
mod buffer;
mod burst;
mod c_struct;
mod call;
mod error;
mod graph;
pub mod input;
mod launch;
mod lease;
mod read_into;
mod session;
mod stream;

pub use actor::{Actor, ActorStatus, PersistentLaunch, Ring};
pub use buffer::DeviceBuffer;
pub use burst::{Burst, MAX_BURST_LAUNCHES};
pub use c_struct::CStruct;
pub use call::{gpu_call, GpuCall};
pub use error::{Error, ErrorKind, Result};
pub use graph::{Graph, GraphArgs, Node, Scalar};
pub use launch::{Arg, KernelArg, Launch, LaunchConfig};
pub use lease::{inventory, DeviceInfo, Lease, LeaseBuilder, LeaseInfo};
pub use read_into::mem_read_into;
pub use session::{Kernel, KernelInfo, KernelParam, Module, ParamKind, Session};
pub use stream::{Event, Stream};

/// Re-export of `bytemuck`, whose [`Pod`] bounds the element types of device buffers and the
/// structs [`Arg::bytes_of`] passes by value.
pub use bytemuck;

/// `bytemuck`'s [`Pod`] and [`Zeroable`], traits and derives,
/// so that a tasklet needs no dependency but this crate to derive them. The derives name
/// `bytemuck` by its path; `#[bytemuck(crate = "tasklet_gpu::bytemuck")]` points them here:
///
/// ```
/// use tasklet_gpu::{Pod, Zeroable};
///
/// // struct Vec3 { float x, y, z; }
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[bytemuck(crate = "tasklet_gpu::bytemuck")]
/// #[repr(C)]
/// struct Vec3 {
///     x: f32,
///     y: f32,
///     z: f32,
/// }
///
/// let arg = tasklet_gpu::Arg::bytes_of(&Vec3 { x: 1.0, y: 0.0, z: 0.0 });
/// ```
///
/// `Pod` refuses a struct with padding; a C struct that has some is built with [`CStruct`].
pub use bytemuck::{Pod, Zeroable};

/// The bindings generated by `wit-bindgen` for the world `tasklet:gpu/tasklet@0.2.0`
/// (`wit/gpu.wit`), unchanged.
///
/// Everything the typed API does goes through these. Use them directly only where the typed API
/// is in the way, e.g. to hand a buffer of one session to another on purpose:
///
/// ```no_run
/// use tasklet_gpu::raw::tasklet::gpu::{leases, sessions};
///
/// let req = leases::LeaseRequest { min_vram: 1 << 20, secs: 10, device: None };
/// let lease = leases::Lease::acquire(req).map_err(tasklet_gpu::Error::from)?;
/// let session = sessions::Session::open(&lease)?;
/// let buf = session.mem_alloc(64)?;
/// let bytes = session.mem_read(&buf, 0, 4)?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
///
/// The typed wrappers give access to their handles with `raw()` (e.g. [`Session::raw`]).
///
/// Do not call the generated `sessions::Session::mem_read_into`: the host fills its `dst` in
/// place, and it takes `&[u8]`, so that would write behind a shared reference (undefined
/// behaviour). [`mem_read_into`] (or [`DeviceBuffer::read_into`]) is the same call, taking
/// `&mut [u8]`.
#[allow(missing_docs, clippy::all)]
pub mod raw {
    wit_bindgen::generate!({
        path: "../wit",
        world: "tasklet",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "tasklet_gpu::raw",
        runtime_path: "tasklet_gpu::__private::wit_bindgen::rt",
        generate_all,
    });

    pub use self::tasklet::gpu::inventory;
    pub use self::tasklet::gpu::leases;
    pub use self::tasklet::gpu::oneshot;
    pub use self::tasklet::gpu::sessions;
    pub use self::tasklet::gpu::types;
}

/// Exports a function as the tasklet's `run` entry point.
///
/// The function takes the input bytes and returns `Result<O, E>` where the output `O` is anything
/// that converts into bytes (`Vec<u8>`, `String`, ...) and the error `E` is anything that
/// implements `Display` (`String`, [`Error`], `&str`, ...). An `Err` becomes the error string the
/// host reports; a panic traps the instance (the host sees a wasm trap, and releases every lease).
///
/// ```no_run
/// fn run(input: Vec<u8>) -> Result<String, tasklet_gpu::Error> {
///     let n = tasklet_gpu::inventory().len();
///     Ok(format!("{} bytes in, {n} devices\n", input.len()))
/// }
///
/// tasklet_gpu::export!(run);
/// ```
///
/// Use it once per crate (the component has one `run` export), at item level.
#[macro_export]
macro_rules! export {
    ($run:path) => {
        const _: () = {
            struct __TaskletRun;

            impl $crate::raw::Guest for __TaskletRun {
                fn run(
                    input: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::__private::finish($run(input))
                }
            }

    $crate::raw::export!(__TaskletRun with_types_in $crate::raw);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    pub use wit_bindgen;

    /// Normalises a `run` function's result into what the WIT export returns.
    pub fn finish<O, E>(result: Result<O, E>) -> Result<Vec<u8>, String>
    where
        O: Into<Vec<u8>>,
        E: core::fmt::Display,
    {
        result.map(Into::into).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finish_converts_outputs_and_errors() {
        let ok: Result<String, &str> = Ok("hi\n".into());
        assert_eq!(super::__private::finish(ok), Ok(b"hi\n".to_vec()));
        let err: Result<Vec<u8>, crate::Error> = Err(crate::Error::QuotaExceeded("no room".into()));
        assert_eq!(
            super::__private::finish(err),
            Err("quota-exceeded: no room".to_string())
        );
    }
}
