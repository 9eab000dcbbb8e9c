//! The integration suite: real tasklet components through the host, worker processes and
//! backends, on the backend `TASKLET_TEST_BACKEND` names (the emulator by default).
//!
//! One test binary, one module per subject, so that the workspace links it once;
//! `cargo test -p tasklet-tests --test suite <module>::` runs one subject. The GPU containment tests
//! are a binary of their own (`gpu.rs`): they time latencies on a shared device, and cargo runs
//! test binaries one after another, so nothing else of the suite runs beside them.

mod actors;
mod bursts;
mod capabilities;
mod contract_v2;
mod devices;
mod examples;
mod fake_cuda;
mod gpu_time;
mod gpubench;
mod graphs;
mod guest_languages;
mod kernel_args;
mod launch_checks;
mod module_cache;
mod multi_devices;
mod reload;
mod sdk;
mod soak;
mod streams;
mod time_limits;
mod workers;
mod zero_copy;
