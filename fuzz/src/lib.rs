//! A generator of syntactically valid PTX programs from fuzz input, for the `run` target.
//!
//! The input is read as a stream of choices: launch shape, then instructions drawn from a grammar
//! of what the emulator supports (integer, float, conversion, comparison, memory in every state
//! space, atomics, warp ops, barriers, calls, branches), each with operands from a fixed register
//! file. Almost every program loads; a few combinations the emulator refuses are simply skipped.
//! Addresses are mostly masked into bounds so that kernels run on, but some are raw register
//! values so that faults are exercised too.
//!
//! [`mutate`] holds the other generator, for the `mutate` target: real kernels, slightly broken.

pub mod mutate;

use std::fmt::Write;

use tasklet_ptx::{DeviceMemory, ExecError, LaunchParams, LaunchStats, Module};

/// Global buffer the kernel gets (bytes; a power of two).
pub const BUF_BYTES: u64 = 256;
/// Lane-instructions a launch may run.
pub const STEP_LIMIT: u64 = 20_000;

/// A generated program and how to launch it.
#[derive(Debug, Clone)]
pub struct Case {
    pub ptx: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

/// Generates a case and runs it: the body of the `run` fuzz target. Returns the launch's result,
/// or None when the emulator refused the program at load.
pub fn run_case(data: &[u8]) -> Option<Result<LaunchStats, ExecError>> {
    let case = generate(data);
    let module = Module::parse(&case.ptx).ok()?;
    let mem = DeviceMemory::new();
    let buf = mem.alloc(BUF_BYTES).expect("alloc");
    let init: Vec<u8> = (0..BUF_BYTES as usize).map(|i| (i as u8).wrapping_mul(37) ^ data.first().copied().unwrap_or(0)).collect();
    mem.write(buf, &init).expect("write");
    let k = &module.kernels()[0];
    let (offs, size) = k.param_layout();
    let mut args = vec![0u8; size as usize];
    args[offs[0] as usize..][..8].copy_from_slice(&buf.to_le_bytes());
    args[offs[1] as usize..][..4].copy_from_slice(&(BUF_BYTES as u32 / 4).to_le_bytes());
    let params = LaunchParams {
        grid: case.grid,
        block: case.block,
        shared_mem_bytes: case.shared_mem_bytes,
        args: &args,
        step_limit: STEP_LIMIT,
        threads: 1,
    };
    let r = module.launch("k", &mem, &params);
    // The memory stays usable whatever the kernel did.
    let mut back = vec![0u8; BUF_BYTES as usize];
    mem.read(buf, &mut back).expect("read after launch");
    Some(r)
}

struct Src<'a> {
    d: &'a [u8],
    i: usize,
}

impl Src<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.d.get(self.i).copied().unwrap_or(0);
        self.i += 1;
        b
    }
    fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        if n <= 256 {
            self.byte() as usize % n
        } else {
            self.u32() as usize % n
        }
    }
    fn pick<'s, T: ?Sized>(&mut self, xs: &[&'s T]) -> &'s T {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, one_in: u8) -> bool {
        self.byte() % one_in == 0
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) << 32 | self.u32() as u64
    }
    fn done(&self) -> bool {
        self.i >= self.d.len()
    }
}

/// Register classes (all declared in every program).
#[derive(Clone, Copy, PartialEq, Eq)]
enum R {
    P,
    H,
    W,
    D,
    F,
    FD,
}

/// Registers the generator may write: the last of each class is reserved (%rd15: the buffer's
/// address, %rd14: a scratch address, %r15: the thread's global index).
fn reg(s: &mut Src<'_>, r: R) -> String {
    match r {
        R::P => format!("%p{}", s.below(8)),
        R::H => format!("%rs{}", s.below(8)),
        R::W => format!("%r{}", s.below(15)),
        R::D => format!("%rd{}", s.below(14)),
        R::F => format!("%f{}", s.below(16)),
        R::FD => format!("%fd{}", s.below(8)),
    }
}

/// A source register, or any reserved register of the class too.
fn sreg(s: &mut Src<'_>, r: R) -> String {
    match r {
        R::W if s.chance(6) => "%r15".into(),
        R::D if s.chance(8) => "%rd15".into(),
        _ => reg(s, r),
    }
}

const FLOAT_SPECIALS32: &[u32] = &[0, 0x8000_0000, 0x3f80_0000, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0x0000_0001, 0x007f_ffff, 0x7f7f_ffff, 0x4b00_0000, 0xcf00_0000, 0x5f00_0000];
const FLOAT_SPECIALS64: &[u64] = &[0, 1 << 63, 0x3ff0_0000_0000_0000, 0x7ff0_0000_0000_0000, 0xfff8_0000_0000_0000, 1, 0x000f_ffff_ffff_ffff, 0x43e0_0000_0000_0000, 0xc3e0_0000_0000_0000];

fn int_imm(s: &mut Src<'_>, bits: u32) -> String {
    let v = match s.below(4) {
        0 => s.below(40) as u64,
        1 => (s.below(8) as u64).wrapping_neg(),
        _ => s.u64(),
    };
    let v = if bits >= 64 { v } else { v & ((1u64 << bits) - 1) };
    v.to_string()
}

/// A source operand for an integer type: a register of its width or an immediate.
fn isrc(s: &mut Src<'_>, bits: u32) -> String {
    if s.chance(4) {
        return int_imm(s, bits);
    }
    sreg(s, int_class(bits))
}

fn int_class(bits: u32) -> R {
    match bits {
        16 => R::H,
        32 => R::W,
        _ => R::D,
    }
}

fn fsrc(s: &mut Src<'_>, f64: bool) -> String {
    if s.chance(5) {
        return if f64 {
            let b = if s.chance(2) { FLOAT_SPECIALS64[s.below(FLOAT_SPECIALS64.len())] } else { s.u64() };
            format!("0d{b:016X}")
        } else {
            let b = if s.chance(2) { FLOAT_SPECIALS32[s.below(FLOAT_SPECIALS32.len())] } else { s.u32() };
            format!("0f{b:08X}")
        };
    }
    reg(s, if f64 { R::FD } else { R::F })
}

/// (type suffix, bits, signed)
const INT_TYS: &[(&str, u32, bool)] = &[("u16", 16, false), ("s16", 16, true), ("u32", 32, false), ("s32", 32, true), ("u64", 64, false), ("s64", 64, true)];

fn int_ty(s: &mut Src<'_>) -> (&'static str, u32, bool) {
    // 32 and 64 bits more often than 16.
    let i = [0, 1, 2, 3, 2, 3, 4, 5, 4, 5][s.below(10)];
    INT_TYS[i]
}

fn b_ty(bits: u32) -> &'static str {
    match bits {
        16 => "b16",
        32 => "b32",
        _ => "b64",
    }
}

fn rnd(s: &mut Src<'_>) -> &'static str {
    s.pick(&[".rn", ".rz", ".rm", ".rp"])
}

/// Where a global access goes: `[%rd14+off]` after masking an index into the buffer (aligned to
/// `align`), or now and then a raw register (likely a fault).
fn global_addr(s: &mut Src<'_>, out: &mut String, align: u64) -> String {
    if s.chance(16) {
        return format!("[{}]", sreg(s, R::D));
    }
    let idx = sreg(s, R::W);
    let mask = (BUF_BYTES - 1) & !(align - 1);
    let _ = writeln!(out, "\tcvt.u64.u32 %rd14, {idx};");
    let _ = writeln!(out, "\tand.b64 %rd14, %rd14, {mask};");
    let _ = writeln!(out, "\tadd.s64 %rd14, %rd15, %rd14;");
    if s.chance(4) {
        // A generic address of the same bytes.
        let _ = writeln!(out, "\tcvta.global.u64 %rd14, %rd14;");
        return "generic:[%rd14]".into();
    }
    "[%rd14]".into()
}

const SHARED_BYTES: u64 = 256;
const LOCAL_BYTES: u64 = 64;

/// Generates one program.
pub fn generate(data: &[u8]) -> Case {
    let mut s = Src { d: data, i: 0 };
    let grid = [1 + s.below(2) as u32, 1, 1];
    let block = [[1u32, 7, 32, 33, 64, 96][s.below(6)], 1 + s.below(2) as u32, 1];
    let shared_mem_bytes = [0u32, 16, 64][s.below(3)];
    let n = 1 + s.below(48);

    let mut body = String::new();
    let mut emitted = 0;
    while emitted < n && !s.done() {
        let _ = writeln!(body, "L{emitted}:");
        instruction(&mut s, &mut body, n);
        emitted += 1;
    }
    // Branches may name labels past the input's end.
    for idx in emitted..n {
        let _ = writeln!(body, "L{idx}:");
    }

    let mut ptx = String::new();
    ptx.push_str(".version 8.0\n.target sm_80\n.address_size 64\n\n");
    ptx.push_str(".global .align 4 .u32 gcount;\n");
    ptx.push_str(".const .align 4 .b32 ctable[4] = {1, 2, 3, 0xffffffff};\n");
    ptx.push_str(".extern .shared .align 16 .b8 dyn_smem[];\n\n");
    ptx.push_str(".func (.param .b32 ret) helper(.param .b32 a, .param .b64 b)\n{\n\t.reg .b32 %t<3>;\n\t.reg .b64 %u<2>;\n");
    ptx.push_str("\tld.param.b32 %t0, [a];\n\tld.param.b64 %u0, [b];\n\tcvt.u32.u64 %t1, %u0;\n\txor.b32 %t2, %t0, %t1;\n\tst.param.b32 [ret], %t2;\n\tret;\n}\n\n");
    ptx.push_str(".visible .entry k(.param .u64 buf, .param .u32 n)\n{\n");
    ptx.push_str("\t.reg .pred %p<8>;\n\t.reg .b16 %rs<8>;\n\t.reg .b32 %r<16>;\n\t.reg .b64 %rd<16>;\n\t.reg .f32 %f<16>;\n\t.reg .f64 %fd<8>;\n");
    let _ = writeln!(ptx, "\t.shared .align 16 .b8 sm[{SHARED_BYTES}];");
    let _ = writeln!(ptx, "\t.local .align 16 .b8 lbuf[{LOCAL_BYTES}];");
    ptx.push_str("\tld.param.u64 %rd15, [buf];\n\tcvta.to.global.u64 %rd15, %rd15;\n");
    ptx.push_str("\tmov.u32 %r0, %tid.x;\n\tmov.u32 %r1, %ctaid.x;\n\tmov.u32 %r2, %ntid.x;\n\tmad.lo.s32 %r15, %r1, %r2, %r0;\n");
    ptx.push_str("\tld.param.u32 %r3, [n];\n\tcvt.u64.u32 %rd0, %r15;\n\tmul.wide.u32 %rd1, %r15, 4;\n\tadd.s64 %rd2, %rd15, %rd1;\n");
    ptx.push_str("\tcvt.rn.f32.u32 %f0, %r15;\n\tcvt.rn.f64.u32 %fd0, %r15;\n\tsetp.lt.u32 %p0, %r15, 16;\n\tcvt.u16.u32 %rs0, %r15;\n");
    ptx.push_str("\tmov.u32 %r4, %laneid;\n\tadd.f32 %f1, %f0, 0f3F000000;\n\tsetp.eq.u32 %p1, %r4, 0;\n");
    ptx.push_str(&body);
    let _ = writeln!(ptx, "L{n}:");
    ptx.push_str("\tret;\n}\n");
    Case { ptx, grid, block, shared_mem_bytes }
}

fn guard(s: &mut Src<'_>) -> String {
    if s.chance(5) {
        let neg = if s.chance(2) { "!" } else { "" };
        format!("@{neg}{} ", reg(s, R::P))
    } else {
        String::new()
    }
}

fn instruction(s: &mut Src<'_>, out: &mut String, n: usize) {
    let g = guard(s);
    let o = out;
    match s.below(30) {
        // Integer binary ops.
        0..=2 => {
            let (t, bits, signed) = int_ty(s);
            let c = int_class(bits);
            let op = s.pick(&["add", "sub", "mul.lo", "mul.hi", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr", "mul.wide", "add.sat", "mul24.lo", "mul24.hi"]);
            match op {
                "and" | "or" | "xor" => {
                    let bt = b_ty(bits);
                    let _ = writeln!(o, "\t{g}{op}.{bt} {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits));
                }
                "shl" | "shr" => {
                    let ty = if op == "shl" { b_ty(bits) } else { t };
                    let _ = writeln!(o, "\t{g}{op}.{ty} {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, 32));
                }
                "mul.wide" if bits < 64 => {
                    let wide = int_class(bits * 2);
                    let _ = writeln!(o, "\t{g}mul.wide.{t} {}, {}, {};", reg(s, wide), isrc(s, bits), isrc(s, bits));
                }
                "add.sat" if bits == 32 && signed => {
                    let _ = writeln!(o, "\t{g}add.sat.s32 {}, {}, {};", reg(s, c), isrc(s, 32), isrc(s, 32));
                }
                "mul24.lo" | "mul24.hi" if bits == 32 => {
                    let _ = writeln!(o, "\t{g}{op}.{t} {}, {}, {};", reg(s, c), isrc(s, 32), isrc(s, 32));
                }
                "mul.wide" | "add.sat" | "mul24.lo" | "mul24.hi" => {
                    let _ = writeln!(o, "\t{g}add.{t} {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits));
                }
                _ => {
                    let _ = writeln!(o, "\t{g}{op}.{t} {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits));
                }
            }
        }
        // Integer ternary and carry chains.
        3 => {
            let (t, bits, _) = int_ty(s);
            let c = int_class(bits);
            match s.below(5) {
                0 | 1 => {
                    let hl = s.pick(&["lo", "hi"]);
                    let _ = writeln!(o, "\t{g}mad.{hl}.{t} {}, {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits), isrc(s, bits));
                }
                2 if bits < 64 => {
                    let w = int_class(bits * 2);
                    let _ = writeln!(o, "\t{g}mad.wide.{t} {}, {}, {}, {};", reg(s, w), isrc(s, bits), isrc(s, bits), sreg(s, w));
                }
                3 => {
                    let _ = writeln!(o, "\t{g}sad.{t} {}, {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits), isrc(s, bits));
                }
                _ => {
                    let w = if bits == 64 { "u64" } else { "u32" };
                    let c = if bits == 64 { R::D } else { R::W };
                    let b = if bits == 64 { 64 } else { 32 };
                    let op = s.pick(&["add", "sub"]);
                    let _ = writeln!(o, "\t{op}.cc.{w} {}, {}, {};", reg(s, c), isrc(s, b), isrc(s, b));
                    let _ = writeln!(o, "\t{op}c.cc.{w} {}, {}, {};", reg(s, c), isrc(s, b), isrc(s, b));
                    let _ = writeln!(o, "\t{op}c.{w} {}, {}, {};", reg(s, c), isrc(s, b), isrc(s, b));
                }
            }
        }
        // Integer unary and bit ops.
        4 | 5 => {
            let (t, bits, _) = int_ty(s);
            let c = int_class(bits);
            let bt = b_ty(bits);
            match s.below(11) {
                0 => {
                    let _ = writeln!(o, "\t{g}not.{bt} {}, {};", reg(s, c), sreg(s, c));
                }
                1 => {
                    let _ = writeln!(o, "\t{g}cnot.{bt} {}, {};", reg(s, c), sreg(s, c));
                }
                2 => {
                    let st = t.replace('u', "s");
                    let op = s.pick(&["neg", "abs"]);
                    let _ = writeln!(o, "\t{g}{op}.{st} {}, {};", reg(s, c), sreg(s, c));
                }
                3 if bits >= 32 => {
                    let op = s.pick(&["popc", "clz"]);
                    let _ = writeln!(o, "\t{g}{op}.{bt} {}, {};", reg(s, R::W), sreg(s, c));
                }
                4 if bits >= 32 => {
                    let _ = writeln!(o, "\t{g}brev.{bt} {}, {};", reg(s, c), sreg(s, c));
                }
                5 if bits >= 32 => {
                    let sh = if s.chance(2) { ".shiftamt" } else { "" };
                    let _ = writeln!(o, "\t{g}bfind{sh}.{t} {}, {};", reg(s, R::W), sreg(s, c));
                }
                6 if bits >= 32 => {
                    let _ = writeln!(o, "\t{g}bfe.{t} {}, {}, {}, {};", reg(s, c), sreg(s, c), isrc(s, 32), isrc(s, 32));
                }
                7 if bits >= 32 => {
                    let _ = writeln!(o, "\t{g}bfi.{bt} {}, {}, {}, {}, {};", reg(s, c), isrc(s, bits), sreg(s, c), isrc(s, 32), isrc(s, 32));
                }
                8 => {
                    let _ = writeln!(o, "\t{g}prmt.b32 {}, {}, {}, {};", reg(s, R::W), isrc(s, 32), isrc(s, 32), isrc(s, 32));
                }
                9 => {
                    let dir = s.pick(&["l", "r"]);
                    let mode = s.pick(&["wrap", "clamp"]);
                    let _ = writeln!(o, "\t{g}shf.{dir}.{mode}.b32 {}, {}, {}, {};", reg(s, R::W), isrc(s, 32), isrc(s, 32), isrc(s, 32));
                }
                _ => {
                    let a = s.pick(&["u32", "s32"]);
                    let b = s.pick(&["u32", "s32"]);
                    let op = s.pick(&["dp4a", "dp2a.lo", "dp2a.hi"]);
                    let _ = writeln!(o, "\t{g}{op}.{a}.{b} {}, {}, {}, {};", reg(s, R::W), isrc(s, 32), isrc(s, 32), isrc(s, 32));
                }
            }
        }
        // f32 arithmetic.
        6..=8 => {
            let ftz = if s.chance(3) { ".ftz" } else { "" };
            let sat = if s.chance(6) { ".sat" } else { "" };
            match s.below(8) {
                0 | 1 => {
                    let op = s.pick(&["add", "sub", "mul"]);
                    let r = if s.chance(3) { "" } else { rnd(s) };
                    let _ = writeln!(o, "\t{g}{op}{r}{ftz}{sat}.f32 {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false));
                }
                2 => {
                    let r = rnd(s);
                    let _ = writeln!(o, "\t{g}fma{r}{ftz}{sat}.f32 {}, {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false), fsrc(s, false));
                }
                3 => {
                    let m = s.pick(&[".rn", ".rz", ".rm", ".rp", ".approx", ".full"]);
                    let _ = writeln!(o, "\t{g}div{m}{ftz}.f32 {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false));
                }
                4 => {
                    let op = s.pick(&["min", "max", "min.NaN", "max.NaN"]);
                    let _ = writeln!(o, "\t{g}{op}{ftz}.f32 {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false));
                }
                5 => {
                    let op = s.pick(&["sqrt.rn", "sqrt.approx", "rcp.rn", "rcp.approx", "rsqrt.approx", "sin.approx", "cos.approx", "lg2.approx", "ex2.approx", "rcp.rz", "sqrt.rp"]);
                    let _ = writeln!(o, "\t{g}{op}{ftz}.f32 {}, {};", reg(s, R::F), fsrc(s, false));
                }
                6 => {
                    let op = s.pick(&["abs", "neg"]);
                    let _ = writeln!(o, "\t{g}{op}{ftz}.f32 {}, {};", reg(s, R::F), fsrc(s, false));
                }
                _ => {
                    let op = s.pick(&["tanh.approx.f32", "copysign.f32", "ex2.approx.ftz.f32"]);
                    if op == "copysign.f32" {
                        let _ = writeln!(o, "\t{g}{op} {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false));
                    } else {
                        let _ = writeln!(o, "\t{g}{op} {}, {};", reg(s, R::F), fsrc(s, false));
                    }
                }
            }
        }
        // f64 arithmetic.
        9 | 10 => match s.below(5) {
            0 | 1 => {
                let op = s.pick(&["add", "sub", "mul", "div"]);
                let r = rnd(s);
                let _ = writeln!(o, "\t{g}{op}{r}.f64 {}, {}, {};", reg(s, R::FD), fsrc(s, true), fsrc(s, true));
            }
            2 => {
                let r = rnd(s);
                let _ = writeln!(o, "\t{g}fma{r}.f64 {}, {}, {}, {};", reg(s, R::FD), fsrc(s, true), fsrc(s, true), fsrc(s, true));
            }
            3 => {
                let op = s.pick(&["sqrt.rn", "rcp.rn", "rsqrt.approx", "abs", "neg", "sqrt.rz", "rcp.rm", "rcp.approx.ftz"]);
                let _ = writeln!(o, "\t{g}{op}.f64 {}, {};", reg(s, R::FD), fsrc(s, true));
            }
            _ => {
                let op = s.pick(&["min", "max"]);
                let _ = writeln!(o, "\t{g}{op}.f64 {}, {}, {};", reg(s, R::FD), fsrc(s, true), fsrc(s, true));
            }
        },
        // Half precision.
        11 => {
            let (t, c) = if s.chance(2) { (s.pick(&["f16", "bf16"]), R::H) } else { (s.pick(&["f16x2", "bf16x2"]), R::W) };
            let bits = if c == R::H { 16 } else { 32 };
            match s.below(4) {
                0 | 1 => {
                    let op = s.pick(&["add", "sub", "mul"]);
                    let r = if s.chance(2) { ".rn" } else { "" };
                    let _ = writeln!(o, "\t{g}{op}{r}.{t} {}, {}, {};", reg(s, c), isrc(s, bits), isrc(s, bits));
                }
                2 => {
                    let _ = writeln!(o, "\t{g}fma.rn.{t} {}, {}, {}, {};", reg(s, c), sreg(s, c), sreg(s, c), sreg(s, c));
                }
                _ => {
                    let op = s.pick(&["neg", "abs"]);
                    let _ = writeln!(o, "\t{g}{op}.{t} {}, {};", reg(s, c), sreg(s, c));
                }
            }
        }
        // Conversions.
        12..=14 => conversion(s, o, &g),
        // Comparisons and selects.
        15 | 16 => compare(s, o, &g),
        // Moves.
        17 => match s.below(6) {
            0 => {
                let (_, bits, _) = int_ty(s);
                let c = int_class(bits);
                let _ = writeln!(o, "\t{g}mov.{} {}, {};", b_ty(bits), reg(s, c), int_imm(s, bits));
            }
            1 => {
                let sr = s.pick(&["%tid.x", "%tid.y", "%ntid.x", "%ctaid.x", "%nctaid.x", "%laneid", "%warpid", "%lanemask_lt", "%lanemask_ge", "%clock", "%nwarpid", "%smid"]);
                let _ = writeln!(o, "\t{g}mov.u32 {}, {sr};", reg(s, R::W));
            }
            2 => {
                let _ = writeln!(o, "\t{g}mov.b64 {}, {{{}, {}}};", reg(s, R::D), sreg(s, R::W), sreg(s, R::W));
            }
            3 => {
                let _ = writeln!(o, "\t{g}mov.b64 {{{}, {}}}, {};", reg(s, R::W), reg(s, R::W), sreg(s, R::D));
            }
            4 => {
                let _ = writeln!(o, "\t{g}mov.b32 {}, {};", reg(s, R::F), sreg(s, R::W));
            }
            _ => {
                let sym = s.pick(&["sm", "gcount", "ctable", "lbuf", "dyn_smem"]);
                let _ = writeln!(o, "\t{g}mov.u64 {}, {sym};", reg(s, R::D));
            }
        },
        // Global memory.
        18 | 19 => {
            let (ty, c, align) = *s.pick(&[
                &("u8", R::H, 1u64),
                &("s8", R::W, 1),
                &("u16", R::H, 2),
                &("u32", R::W, 4),
                &("s32", R::W, 4),
                &("u64", R::D, 8),
                &("f32", R::F, 4),
                &("f64", R::FD, 8),
            ]);
            let st = s.chance(2);
            let vec = s.below(3);
            let (vty, valign) = match vec {
                1 if align >= 4 => (format!(".v2.{ty}"), align * 2),
                2 if align == 4 => (format!(".v4.{ty}"), 16),
                _ => (format!(".{ty}"), align),
            };
            let addr = global_addr(s, o, valign);
            let (space, addr) = match addr.strip_prefix("generic:") {
                Some(a) => ("", a.to_string()),
                None => (".global", addr),
            };
            let val = if vty.starts_with(".v2") {
                format!("{{{}, {}}}", reg(s, c), reg(s, c))
            } else if vty.starts_with(".v4") {
                format!("{{{}, {}, {}, {}}}", reg(s, c), reg(s, c), reg(s, c), reg(s, c))
            } else {
                reg(s, c)
            };
            if st {
                let _ = writeln!(o, "\t{g}st{space}{vty} {addr}, {val};");
            } else {
                let nc = if space == ".global" && s.chance(4) { ".nc" } else { "" };
                let _ = writeln!(o, "\t{g}ld{space}{nc}{vty} {val}, {addr};");
            }
        }
        // Shared, local, const memory.
        20 => {
            let (sym, size) = *s.pick(&[&("sm", SHARED_BYTES), &("lbuf", LOCAL_BYTES), &("ctable", 16u64), &("dyn_smem", 16)]);
            let space = match sym {
                "sm" | "dyn_smem" => "shared",
                "lbuf" => "local",
                _ => "const",
            };
            let (ty, c, align) = *s.pick(&[&("u32", R::W, 4u64), &("u64", R::D, 8), &("f32", R::F, 4), &("u16", R::H, 2), &("u8", R::W, 1)]);
            let off = (s.below(size as usize) as u64) & !(align - 1);
            let off = if s.chance(24) { s.below(4096) as u64 } else { off };
            if space != "const" && s.chance(2) {
                let _ = writeln!(o, "\t{g}st.{space}.{ty} [{sym}+{off}], {};", sreg(s, c));
            } else {
                let _ = writeln!(o, "\t{g}ld.{space}.{ty} {}, [{sym}+{off}];", reg(s, c));
            }
        }
        // Atomics.
        21 | 22 => {
            let shared = s.chance(3);
            let (ty, c, bits) = *s.pick(&[&("u32", R::W, 32u32), &("s32", R::W, 32), &("u64", R::D, 64), &("b32", R::W, 32), &("f32", R::F, 32), &("b64", R::D, 64), &("f64", R::FD, 64)]);
            let op = match ty {
                "f32" | "f64" => "add",
                "b32" | "b64" => s.pick(&["and", "or", "xor", "exch", "cas"]),
                "u32" => s.pick(&["add", "min", "max", "inc", "dec"]),
                _ => s.pick(&["add", "min", "max"]),
            };
            let addr = if shared {
                let off = s.below(SHARED_BYTES as usize / 8) * 8;
                format!("[sm+{off}]")
            } else {
                global_addr(s, o, bits as u64 / 8).replace("generic:", "")
            };
            let space = if shared { ".shared" } else { ".global" };
            let src = |s: &mut Src<'_>| if c == R::F || c == R::FD { fsrc(s, c == R::FD) } else { isrc(s, bits) };
            if op == "cas" {
                let (a, b) = (src(s), src(s));
                let _ = writeln!(o, "\t{g}atom{space}.cas.{ty} {}, {addr}, {a}, {b};", reg(s, c));
            } else if s.chance(3) && op != "exch" {
                let _ = writeln!(o, "\t{g}red{space}.{op}.{ty} {addr}, {};", src(s));
            } else {
                let _ = writeln!(o, "\t{g}atom{space}.{op}.{ty} {}, {addr}, {};", reg(s, c), src(s));
            }
        }
        // Warp-level ops.
        23 | 24 => {
            let mask = if s.chance(8) { format!("{}", s.u32()) } else { "-1".into() };
            match s.below(6) {
                0 | 1 => {
                    let mode = s.pick(&["up", "down", "bfly", "idx"]);
                    let dst = if s.chance(2) { format!("{}|{}", reg(s, R::W), reg(s, R::P)) } else { reg(s, R::W) };
                    let _ = writeln!(o, "\t{g}shfl.sync.{mode}.b32 {dst}, {}, {}, {}, {mask};", sreg(s, R::W), isrc(s, 32), s.pick(&["31", "0", "0x1f", "7199", "0x181f"]));
                }
                2 => {
                    let m = s.pick(&["any", "all", "uni"]);
                    let neg = if s.chance(3) { "!" } else { "" };
                    let _ = writeln!(o, "\t{g}vote.sync.{m}.pred {}, {neg}{}, {mask};", reg(s, R::P), reg(s, R::P));
                }
                3 => {
                    let _ = writeln!(o, "\t{g}vote.sync.ballot.b32 {}, {}, {mask};", reg(s, R::W), reg(s, R::P));
                }
                4 => {
                    let (op, t) = *s.pick(&[&("add", "u32"), &("add", "s32"), &("min", "u32"), &("max", "s32"), &("and", "b32"), &("or", "b32"), &("xor", "b32")]);
                    let _ = writeln!(o, "\t{g}redux.sync.{op}.{t} {}, {}, {mask};", reg(s, R::W), sreg(s, R::W));
                }
                _ => {
                    if s.chance(2) {
                        let _ = writeln!(o, "\t{g}activemask.b32 {};", reg(s, R::W));
                    } else {
                        let (t, c) = *s.pick(&[&("b32", R::W), &("b64", R::D)]);
                        let _ = writeln!(o, "\t{g}match.any.sync.{t} {}, {}, {mask};", reg(s, R::W), sreg(s, c));
                    }
                }
            }
        }
        // Barriers and fences.
        25 => match s.below(5) {
            0 | 1 => {
                let _ = writeln!(o, "\t{g}bar.sync 0;");
            }
            2 => {
                let op = s.pick(&["popc", "and", "or"]);
                let _ = writeln!(o, "\t{g}bar.red.{op}.{} {}, 0, {};", if op == "popc" { "u32" } else { "pred" }, if op == "popc" { reg(s, R::W) } else { reg(s, R::P) }, reg(s, R::P));
            }
            3 => {
                let _ = writeln!(o, "\t{g}membar.gl;");
            }
            _ => {
                let _ = writeln!(o, "\t{g}bar.warp.sync -1;");
            }
        },
        // Branches.
        26 | 27 => {
            let target = s.below(n + 1);
            let p = reg(s, R::P);
            let neg = if s.chance(2) { "!" } else { "" };
            if s.chance(6) {
                let _ = writeln!(o, "\tbra.uni L{target};");
            } else {
                let _ = writeln!(o, "\t@{neg}{p} bra L{target};");
            }
        }
        // Calls.
        28 => {
            let a = isrc(s, 32);
            let b = sreg(s, R::D);
            let d = reg(s, R::W);
            let _ = writeln!(o, "\t{{\n\t.param .b32 pa;\n\t.param .b64 pb;\n\t.param .b32 pr;");
            let _ = writeln!(o, "\tst.param.b32 [pa], {a};\n\tst.param.b64 [pb], {b};");
            let _ = writeln!(o, "\t{g}call.uni (pr), helper, (pa, pb);\n\tld.param.b32 {d}, [pr];\n\t}}");
        }
        // Rare ends.
        _ => match s.below(8) {
            0 => {
                let _ = writeln!(o, "\t{g}ret;");
            }
            1 => {
                let _ = writeln!(o, "\t{g}exit;");
            }
            2 => {
                let _ = writeln!(o, "\t@%p7 trap;");
            }
            3 => {
                let _ = writeln!(o, "\t{g}testp.{} {}, {};", s.pick(&["finite.f32", "infinite.f32", "number.f32", "notanumber.f32", "normal.f32", "subnormal.f32"]), reg(s, R::P), fsrc(s, false));
            }
            4 => {
                let _ = writeln!(o, "\t{g}slct.b32.s32 {}, {}, {}, {};", reg(s, R::W), isrc(s, 32), isrc(s, 32), isrc(s, 32));
            }
            5 => {
                let _ = writeln!(o, "\t{g}slct.f32.f32 {}, {}, {}, {};", reg(s, R::F), fsrc(s, false), fsrc(s, false), fsrc(s, false));
            }
            6 => {
                let _ = writeln!(o, "\t{g}atom.global.add.u32 {}, [gcount], 1;", reg(s, R::W));
            }
            _ => {
                let _ = writeln!(o, "\t{g}cvta.to.shared.u64 {}, {};", reg(s, R::D), sreg(s, R::D));
            }
        },
    }
}

/// (name, class, kind) with kind 'u', 's', 'f', 'h' (f16/bf16)
const CVT_TYS: &[(&str, R, char, u32)] = &[
    ("u8", R::H, 'u', 8),
    ("s8", R::H, 's', 8),
    ("u16", R::H, 'u', 16),
    ("s16", R::H, 's', 16),
    ("u32", R::W, 'u', 32),
    ("s32", R::W, 's', 32),
    ("u64", R::D, 'u', 64),
    ("s64", R::D, 's', 64),
    ("f16", R::H, 'h', 16),
    ("bf16", R::H, 'h', 16),
    ("f32", R::F, 'f', 32),
    ("f64", R::FD, 'f', 64),
];

fn conversion(s: &mut Src<'_>, o: &mut String, g: &str) {
    let (dn, dc, dk, dbits) = CVT_TYS[s.below(CVT_TYS.len())];
    let (sn, sc, sk, sbits) = CVT_TYS[s.below(CVT_TYS.len())];
    let dfloat = dk == 'f' || dk == 'h';
    let sfloat = sk == 'f' || sk == 'h';
    let mut m = String::new();
    if dfloat && sfloat {
        if dbits < sbits || (dn == "bf16") != (sn == "bf16") && dbits == sbits {
            m.push_str(rnd(s));
        } else if dn == sn && s.chance(2) {
            m.push_str(s.pick(&[".rni", ".rzi", ".rmi", ".rpi"]));
        }
    } else if dfloat {
        m.push_str(rnd(s));
    } else if sfloat {
        m.push_str(s.pick(&[".rni", ".rzi", ".rmi", ".rpi"]));
    }
    if (dn == "f32" || sn == "f32") && s.chance(3) {
        m.push_str(".ftz");
    }
    if s.chance(5) && (dfloat || dbits < sbits || dk != sk) {
        m.push_str(".sat");
    }
    let src = match sc {
        R::F => fsrc(s, false),
        R::FD => fsrc(s, true),
        c => sreg(s, c),
    };
    let _ = writeln!(o, "\t{g}cvt{m}.{dn}.{sn} {}, {src};", reg(s, dc));
}

fn compare(s: &mut Src<'_>, o: &mut String, g: &str) {
    let kind = s.below(4);
    let (t, a, b) = match kind {
        0 | 1 => {
            let (t, bits, signed) = int_ty(s);
            let t = if !signed && s.chance(3) { b_ty(bits) } else { t };
            (t, isrc(s, bits), isrc(s, bits))
        }
        2 => ("f32", fsrc(s, false), fsrc(s, false)),
        _ => ("f64", fsrc(s, true), fsrc(s, true)),
    };
    let cmp = if t.starts_with('f') {
        s.pick(&["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"])
    } else if t.starts_with('b') {
        s.pick(&["eq", "ne"])
    } else if t.starts_with('u') {
        s.pick(&["eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs"])
    } else {
        s.pick(&["eq", "ne", "lt", "le", "gt", "ge"])
    };
    match s.below(5) {
        0 => {
            let bop = s.pick(&["and", "or", "xor"]);
            let neg = if s.chance(2) { "!" } else { "" };
            let _ = writeln!(o, "\t{g}setp.{cmp}.{bop}.{t} {}|{}, {a}, {b}, {neg}{};", reg(s, R::P), reg(s, R::P), reg(s, R::P));
        }
        1 => {
            let (dt, dc) = *s.pick(&[&("u32", R::W), &("s32", R::W), &("f32", R::F)]);
            let _ = writeln!(o, "\t{g}set.{cmp}.{dt}.{t} {}, {a}, {b};", reg(s, dc));
        }
        2 => {
            let (st, sc) = *s.pick(&[&("b32", R::W), &("b64", R::D), &("f32", R::F), &("f64", R::FD), &("b16", R::H)]);
            let src = |s: &mut Src<'_>| match sc {
                R::F => fsrc(s, false),
                R::FD => fsrc(s, true),
                c => sreg(s, c),
            };
            let (x, y) = (src(s), src(s));
            let _ = writeln!(o, "\t{g}selp.{st} {}, {x}, {y}, {};", reg(s, sc), reg(s, R::P));
        }
        _ => {
            let _ = writeln!(o, "\t{g}setp.{cmp}.{t} {}, {a}, {b};", reg(s, R::P));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(count: usize, len: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..count).map(move |_| {
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        })
    }

    /// The grammar must match what the emulator accepts: nearly every program loads.
    #[test]
    fn generated_programs_load() {
        let mut failures = std::collections::BTreeMap::<String, (usize, String)>::new();
        let total = 3000;
        let mut ok = 0;
        for data in inputs(total, 400) {
            let case = generate(&data);
            match Module::parse(&case.ptx) {
                Ok(_) => ok += 1,
                Err(e) => {
                    let line = case.ptx.lines().nth(e.line as usize - 1).unwrap_or("").trim().to_string();
                    let key: String = line.split_whitespace().next().unwrap_or("").to_string();
                    let ent = failures.entry(key).or_insert((0, format!("{line}  -- {}", e.message)));
                    ent.0 += 1;
                }
            }
        }
        for (k, (n, ex)) in &failures {
            eprintln!("{n:5} {k}: {ex}");
        }
        assert!(ok * 100 >= total * 97, "only {ok} of {total} generated programs load");
    }

    /// Most programs should run a while rather than fault at once, or the fuzzer explores little.
    #[test]
    fn generated_programs_run() {
        let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
        let mut instructions = 0u64;
        for data in inputs(1000, 300) {
            let key = match run_case(&data) {
                None => "load error".to_string(),
                Some(Ok(st)) => {
                    instructions += st.lane_instructions;
                    "ok".into()
                }
                Some(Err(ExecError::Fault { message, .. })) => {
                    format!("fault: {}", message.split(|c: char| c.is_ascii_digit() || c == ':').next().unwrap_or(""))
                }
                Some(Err(ExecError::StepLimit { .. })) => "step limit".into(),
                Some(Err(ExecError::InvalidLaunch(m))) => format!("invalid launch: {m}"),
            };
            *outcomes.entry(key).or_default() += 1;
        }
        for (k, n) in &outcomes {
            eprintln!("{n:5} {k}");
        }
        eprintln!("lane-instructions in finished launches: {instructions}");
        assert!(outcomes.get("ok").copied().unwrap_or(0) >= 300, "{outcomes:?}");
    }
}
