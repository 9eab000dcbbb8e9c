//! The TLS crate's integration tests: certificate folders on disk and real QUIC handshakes on
//! 127.0.0.1 between a node and its clients.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-tls --test tls <module>::` runs one subject. Every test makes its own
//! folders and endpoints, so they share nothing but the machine.

mod common;
mod folder;
mod handshake;
