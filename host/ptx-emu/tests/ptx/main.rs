//! The emulator's integration tests: committed PTX from kernels/ and hand-written PTX, parsed,
//! launched and checked against CPU references.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-ptx --test ptx <module>::` runs one subject.

mod actors;
mod approx;
mod basic_kernels;
mod cooperative;
mod corpus;
mod entry_signatures;
mod handwritten;
mod int_ops;
mod memory_and_loading;
mod nvrtc12;
mod param_space;
mod support;
