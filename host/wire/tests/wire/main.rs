//! The wire crate's integration tests: the byte layout the docs show, round trips of every
//! message, every way bytes are refused, random and damaged input, and the client's tracker.
//!
//! One test binary, one module per subject, so that the crate links its tests once;
//! `cargo test -p tasklet-wire --test wire <module>::` runs one subject. `allocation` stays
//! a binary of its own: it installs a counting global allocator.

mod layout;
mod random_input;
mod rejections;
mod relocations;
mod round_trip;
mod support;
mod tracker;
