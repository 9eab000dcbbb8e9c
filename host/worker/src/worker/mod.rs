//! The worker's side: what runs inside a worker process.
//!
//! - [`process`]: [`serve_main`], the process from its command line to its exit status;
//! - [`serve`]: the loop that serves the host's requests against a backend;
//! - [`backend`]: what requests run on ([`Backend`]: the emulator, a CUDA GPU, or nothing);
//! - [`attach`]: guest memories the host sent, mapped here for `write-from` / `read-into`;
//! - [`nvrtc`]: CUDA C to PTX, for the backends' `load-source`;
//! - [`cpus`]: pinning the serving thread to a CPU near the GPU.

pub mod attach;
pub mod backend;
pub mod cpus;
pub mod nvrtc;
pub mod process;
pub mod serve;

pub use backend::{
    Backend, BackendError, CudaBackend, EmuBackend, EMU_LANE_INSTRUCTIONS_PER_SECOND,
    EMU_MAX_DEVICE_MAPPINGS, EMU_MAX_RESIDENT_CTAS,
};
pub use process::serve_main;
