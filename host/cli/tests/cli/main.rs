//! The `tasklet` command as users meet it: this crate's `tasklet` binary run as a child process
//! — local runs and checks, PTX checks, a node on loopback, and a cluster over a real nats-server.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-cli --test cli <module>::` runs one subject. Every test runs its own
//! `tasklet` processes, in its own temp folders and on its own ports.

mod check;
mod cli;
mod cluster;
mod compile_cache;
mod inventory;
mod node;
mod ptx_check;
mod support;
