//! Arbitrary bytes → `Module::parse` (and `entry_signatures`): may fail, must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let sigs = tasklet_ptx::entry_signatures(&text);
    if let Ok(m) = tasklet_ptx::Module::parse(&text) {
        // Whatever loads must list the same kernels as the signature-only parse.
        assert_eq!(sigs.as_deref().ok(), Some(m.kernels()), "entry_signatures disagrees with Module::parse");
        for k in m.kernels() {
            let _ = k.param_layout();
        }
    }
});
