//! The store's integration tests: a real store in a fresh temp folder per test — blobs, the
//! compiled-component cache, deployments, and names that try to reach outside the store.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-store --test store <module>::` runs one subject. Every test opens its
//! own store, so they share nothing but the machine.

mod blobs;
mod compiled;
mod deployments;
mod escape;
mod support;
