//! Bytes → one launch through `LocalGpu` on the emulator (`src/lib.rs`): kernel arguments of
//! every kind against kernels of many parameter layouts. Must never panic; what the kernel sees
//! must be what was passed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tasklet_runtime_fuzz::run(data);
});
