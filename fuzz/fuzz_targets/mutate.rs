//! Bytes → a mutated kernel of the corpus (`src/mutate.rs`) → `Module::parse` and
//! `entry_signatures`, then each kernel launched when it loads: may fail, must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tasklet_ptx_fuzz::mutate::run_mutated(data);
});
