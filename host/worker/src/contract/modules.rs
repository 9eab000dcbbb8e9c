//! Which modules a worker shares, and how many it holds: the host answers a repeated load of
//! a shared module itself (`Worker::load_module`), so both sides must agree on both.
//!
//! A worker gives each load its own module id, but loads of the same PTX text share one loaded
//! module when the text declares no module-scope `.global` variables: such a module holds no
//! state a kernel can change, so sharing it cannot be seen. A module with `.global` variables is
//! loaded afresh every time, as CUDA itself does (each load has its own variables).

/// Module ids a worker may hold at once, each load counted (shared or not).
pub const MAX_MODULES: usize = 4096;

/// Bytes of module text (PTX; for a CUDA C load, the larger of its source and the PTX NVRTC
/// made of it) a worker may hold loaded at once. A loaded module costs its worker memory no
/// lease's grant counts, several times its text (the emulator's parsed module; on a GPU the
/// driver's compiled code, in device memory too), so without this bound the module limit alone
/// would let one lease hold gigabytes of the machine's memory. Each load the worker makes is
/// counted; a repeated load of a shared module that the host answers is not counted again.
pub const MAX_MODULE_TEXT_BYTES: usize = 128 << 20;

/// The most PTX NVRTC may make of one CUDA C load, as a load of PTX itself is bounded by the
/// data region it travels in: a few kilobytes of source can unroll into any amount of it.
pub const MAX_COMPILED_PTX_BYTES: usize = 8 << 20;

/// Whether the PTX declares module-scope `.global` variables (kernel-writable state).
/// Conservative: anything it cannot rule out counts as yes.
pub fn declares_module_globals(ptx: &str) -> bool {
    if ptx.contains("/*") {
        return true;
    }
    // A `.global` directive is a word of its own anywhere in the code (an instruction's
    // `ld.global.u32` is one word): at a line's start, after linkage words, after a brace.
    let directive = |w: &str| w == ".global" || w.starts_with(".global");
    ptx.lines().any(|line| {
        let code = line.split("//").next().unwrap_or("");
        code.split(|c: char| c.is_whitespace() || matches!(c, '{' | '}' | ';' | '(' | ')' | ','))
            .any(directive)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_globals_are_spotted() {
        assert!(declares_module_globals(
            ".version 8.0\n.target sm_80\n.global .align 4 .u32 counter;\n"
        ));
        assert!(declares_module_globals(
            ".visible .global .align 4 .b8 table[16];"
        ));
        assert!(declares_module_globals(
            "  .extern .global .u32 x; // comment"
        ));
        assert!(declares_module_globals(
            "/* block comment */ .entry k() { ret; }"
        ));
        assert!(!declares_module_globals(
            ".version 8.0\n.target sm_80\n.visible .entry k(.param .u64 p)\n{\n\tld.param.u64 %rd1, [p];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tst.global.u32 [%rd2], 1;\n\tret;\n}\n// .global in a comment\n"
        ));
        assert!(!declares_module_globals(
            ".const .align 4 .u32 c = 1;\n.shared .u32 s;"
        ));
        // Not first on its line: after a brace, or in a body's block.
        assert!(declares_module_globals(
            ".visible .entry k() { .global .align 4 .u32 c;\n ret; }"
        ));
        assert!(declares_module_globals(
            ".entry k()\n{\n\t{ .reg .b32 %r; .global .u32 hidden; }\n\tret;\n}"
        ));
    }

    #[test]
    fn every_committed_kernel_is_classified() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kernels");
        let misc = std::fs::read_to_string(dir.join("misc.ptx")).unwrap();
        assert!(
            declares_module_globals(&misc),
            "misc.cu has a __device__ global"
        );
        let iota = std::fs::read_to_string(dir.join("iota.ptx")).unwrap();
        assert!(!declares_module_globals(&iota));
    }
}
