//! The worker crate's integration tests: real worker processes (this crate's `tasklet-worker`
//! binary) through the host side — spawn, the channel, the pool, guest memories, the emu backend
//! on kernels/, NVRTC, the cuda backend against a fake `libcuda`, and what launches and modules are
//! checked against on both.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-worker --test worker <module>::` runs one subject. Every test runs its
//! own worker processes, so they share nothing but the machine.

mod emu;
mod fake_cuda;
mod fake_cuda_persistent;
mod guest_memory;
mod launch_checks;
mod marks;
mod module_loads;
mod nvrtc;
mod pool;
mod process;
mod support;
mod waits;
