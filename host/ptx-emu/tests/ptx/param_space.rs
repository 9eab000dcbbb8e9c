//! A kernel's parameter space is capped at CUDA's limit at load, so no later layout can overflow.

use tasklet_ptx::{entry_signatures, Module, MAX_PARAM_BYTES};

fn module_with_params(count: usize, align: u32) -> String {
    let params: Vec<String> = (0..count)
        .map(|i| format!("\t.param .align {align} .b8 p{i}[1]"))
        .collect();
    format!(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(\n{}\n)\n{{\n\tret;\n}}\n", params.join(",\n"))
}

#[test]
fn parameter_space_past_the_cuda_limit_is_a_load_error() {
    // 65,537 parameters aligned to 64 KiB would wrap a 32-bit layout; 40 of 1 KiB pass 32,764.
    for ptx in [
        module_with_params(65_537, 65_536),
        module_with_params(40, 1024),
    ] {
        let err = Module::parse(&ptx).err().expect("refused");
        assert!(err.message.contains(&MAX_PARAM_BYTES.to_string()), "{err}");
        let err = entry_signatures(&ptx).expect_err("refused");
        assert!(err.message.contains("bytes of parameters"), "{err}");
    }
    let fits = module_with_params(31, 1024);
    let m = Module::parse(&fits).expect("31 KiB of parameters fit");
    assert_eq!(m.kernels()[0].param_layout().1, 30 * 1024 + 1);
}
