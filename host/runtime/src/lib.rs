//! The tasklet host: runs tasklet components under wasmtime, implements `tasklet:gpu` with every call
//! checked against the tasklet's grant, and serves leases from supervised GPU worker processes.

pub mod config;
