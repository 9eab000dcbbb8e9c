//! `entry_signatures`: kernel parameter lists without validating instruction bodies.

use tasklet_ptx::{entry_signatures, module_outline, KernelInfo, Module, ParamInfo, ParamType};

#[test]
fn matches_module_kernels_on_every_corpus_file() {
    let dir = format!("{}/../../kernels", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .collect();
    // NVRTC-compiled corpus entries live one level down.
    if let Ok(rd) = std::fs::read_dir(format!("{dir}/nvrtc12")) {
        files.extend(
            rd.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "ptx")),
        );
    }
    files.sort();
    assert!(files.len() >= 14, "corpus not found in {dir}");
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let full = Module::parse(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let sigs = entry_signatures(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!sigs.is_empty(), "{}", path.display());
        assert_eq!(sigs, full.kernels(), "{}", path.display());
        let outline = module_outline(&src).unwrap();
        assert_eq!(outline.kernels, sigs, "{}", path.display());
        assert_eq!(
            outline.variable_bytes,
            full.variable_bytes(),
            "{}",
            path.display()
        );
    }
}

/// A module's own `.global` variables are counted as laid out (aligned, each at least a byte),
/// the same by the outline as by the emulator's loader; `.const` and `.shared` ones are not.
#[test]
fn an_outline_counts_the_modules_own_variables() {
    let ptx = r#"
.version 8.0
.target sm_80
.address_size 64
.global .align 4 .b8 table[1000];
.visible .global .align 8 .u64 counter;
.const .align 4 .f32 weights[3] = {1.0, 2.0, 3.0};
.extern .global .align 4 .b8 elsewhere[];
.shared .align 4 .b8 scratch[4096];
.visible .entry k(.param .u64 p) { ret; }
"#;
    let outline = module_outline(ptx).unwrap();
    // table 0..1000, counter 1000..1008, elsewhere (no size) one byte.
    assert_eq!(outline.variable_bytes, 1009);
    assert_eq!(outline.kernels.len(), 1);
    assert_eq!(Module::parse(ptx).unwrap().variable_bytes(), 1009);
    let none = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { ret; }\n";
    assert_eq!(module_outline(none).unwrap().variable_bytes, 0);
}

/// `.global` variables declared in a function's body, in nested blocks and in a `.func`, take
/// memory in each loaded copy as module-scope ones do, and are counted alike, also where the
/// body is one the emulator cannot read.
#[test]
fn function_scope_globals_are_counted() {
    let ptx = r#"
.version 8.0
.target sm_80
.address_size 64
.func helper() { .global .align 4 .b8 in_func[100]; ret; }
.visible .entry k(.param .u64 p)
{
    .global .align 8 .b8 big[4096];
    {
        .global .align 16 .b8 nested[2][8];
    }
    ret;
}
"#;
    // in_func 0..100, big at 104..4200, nested at 4208..4224.
    assert_eq!(module_outline(ptx).unwrap().variable_bytes, 4224);
    assert_eq!(Module::parse(ptx).unwrap().variable_bytes(), 4224);
    // A pointer parameter's `.ptr .global` is no declaration.
    let pointer = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .func f(.param .b64 .ptr .global .align 8 x) { ret; }\n\
        .visible .entry k(.param .u64 .ptr .global .align 1 p) { ret; }\n";
    assert_eq!(module_outline(pointer).unwrap().variable_bytes, 0);
    assert_eq!(Module::parse(pointer).unwrap().variable_bytes(), 0);
    let unreadable = ptx.replace("ret;\n}", "frobnicate.sync.aligned %r1;\n    ret;\n}");
    assert!(
        Module::parse(&unreadable).is_err(),
        "a body the emulator cannot read"
    );
    assert_eq!(module_outline(&unreadable).unwrap().variable_bytes, 4224);
}

/// `.const` variables share the 64 KiB constant bank a module has on a GPU: more is refused,
/// at module scope or in a body, naming the bank.
#[test]
fn const_variables_past_the_constant_bank_are_refused() {
    let module = |decls: &str| {
        format!(
            ".version 8.0\n.target sm_80\n.address_size 64\n{decls}\n.visible .entry k() {{ ret; }}\n"
        )
    };
    let fits = module(".const .align 4 .b8 table[65536];");
    assert_eq!(module_outline(&fits).unwrap().variable_bytes, 0);
    assert!(Module::parse(&fits).is_ok());
    for past in [
        module(".const .align 4 .b8 table[65537];"),
        module(".const .b8 a[40000];\n.const .b8 b[40000];"),
        ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { .const .b8 c[70000]; ret; }\n"
            .to_owned(),
    ] {
        let err = module_outline(&past).unwrap_err();
        assert!(err.message.contains("constant bank"), "{}", err.message);
        assert!(Module::parse(&past).is_err());
    }
}

const MMA_MODULE: &str = r#"
.version 8.0
.target sm_80
.address_size 64

.func (.param .b32 r) helper(.param .b32 a) { ret; }

.visible .entry tc_gemm(
    .param .u64 tc_gemm_param_0,
    .param .u64 tc_gemm_param_1,
    .param .align 8 .b8 tc_gemm_param_2[12],
    .param .u32 tc_gemm_param_3
)
.maxntid 128, 1, 1
{
    .reg .b32 %r<20>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b8 tile[1024];
    ld.param.u64 %rd1, [tc_gemm_param_0];
    { // nested scope
        ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [tile];
    }
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r1,%r2,%r3,%r4}, {%r5,%r6}, {%f4,%f5,%f6,%f7};
    cp.async.ca.shared.global [tile], [%rd1], 16;
    ret;
}

.entry second(.param .f64 x, .param .s64 y) { ret; }
.extern .entry declared_only(.param .u32 z);
"#;

#[test]
fn lists_kernels_the_emulator_refuses() {
    let refused = Module::parse(MMA_MODULE)
        .err()
        .expect("the emulator must refuse mma/ldmatrix");
    assert!(refused.line > 0);
    let sigs = entry_signatures(MMA_MODULE).unwrap();
    let p = |name: &str, size, align, pointer_sized, ty, used_as_address| ParamInfo {
        name: name.into(),
        size,
        align,
        pointer_sized,
        ty,
        used_as_address,
    };
    use ParamType::*;
    assert_eq!(
        sigs,
        vec![
            KernelInfo {
                name: "tc_gemm".into(),
                params: vec![
                    // The source of the global → shared copy: an address.
                    p("tc_gemm_param_0", 8, 8, true, Unsigned, true),
                    p("tc_gemm_param_1", 8, 8, true, Unsigned, false),
                    p("tc_gemm_param_2", 12, 8, false, Aggregate, false),
                    p("tc_gemm_param_3", 4, 4, false, Unsigned, false),
                ],
            },
            KernelInfo {
                name: "second".into(),
                params: vec![
                    p("x", 8, 8, false, Float, false),
                    p("y", 8, 8, true, Signed, false)
                ]
            },
        ]
    );
    assert_eq!(sigs[0].param_layout(), (vec![0, 8, 16, 28], 32));
}

#[test]
fn reports_header_and_brace_errors_with_lines() {
    let e = entry_signatures(".version 8.0\n.entry k(.param .u32 a) {\n  ret;\n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("unterminated"), "{e}");
    let e = entry_signatures(".version 8.0\n\n.entry k(.param .q32 a) { ret; }\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    let e = entry_signatures(".entry k(.param .u32 a) { mov.u32 %r1, 0fZZ; }").unwrap_err();
    assert_eq!(e.line, 1, "{e}");
}

#[test]
fn param_types_as_declared() {
    let types = tasklet_ptx::entry_param_types(MMA_MODULE).unwrap();
    assert_eq!(
        types,
        vec![
            vec![".u64", ".u64", ".align 8 .b8[12]", ".u32"],
            vec![".f64", ".s64"]
        ]
    );
}

#[test]
fn every_pointer_of_the_corpus_is_found_as_an_address_and_its_one_u64_index_is_not() {
    // Every kernel of kernels/ takes its 64-bit parameters as pointers, but for
    // `write_out_of_bounds(unsigned* out, unsigned long long offset)`'s index.
    let dir = format!("{}/../../kernels", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .collect();
    files.sort();
    let mut pointers = 0;
    for path in files {
        let src = std::fs::read_to_string(&path).unwrap();
        let full = Module::parse(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for k in full.kernels() {
            for p in &k.params {
                let index = p.name == "write_out_of_bounds_param_1";
                let expected = p.pointer_sized && !index;
                assert_eq!(p.used_as_address, expected, "{}: {}", k.name, p.name);
                pointers += expected as usize;
            }
        }
    }
    assert!(pointers >= 60, "{pointers}");
}
