//! Valid PTX programs built from the input by a grammar of the supported instructions, launched
//! on a small grid against a small DeviceMemory with a small step limit: may fault, hit the
//! step limit or deadlock (all `ExecError`s), must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tasklet_ptx_fuzz::run_case(data);
});
