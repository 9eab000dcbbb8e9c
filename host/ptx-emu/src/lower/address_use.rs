//! Which of a kernel's parameters it uses as global memory addresses: a parameter loaded whole
//! (`ld.param.u64`) whose value reaches, through moves, conversions and pointer arithmetic, the
//! address of a load, store, atomic or copy in global (or generic) memory.
//!
//! A forward dataflow over the body's registers, without regard to control flow: every register
//! holds the set of parameters its value may be based on, and the sets only grow until nothing
//! changes. What keeps an index from being taken for a base:
//!
//! - Multiplying, shifting, masking or loading a value yields no provenance, so `p + (n << 2)`
//!   is based on `p` alone; `mad` keeps only its addend's.
//! - A value through `cvta.to.global` is certainly an address (*strong*). An addition with a
//!   strong operand is based on that operand only: in `cvta(p) + n`, `n` is an index even
//!   unscaled (a `char*` indexed by a `u64`). Only where neither side is known to be an address
//!   (hand-written PTX without `cvta`) do both sides count.
//!
//! When unsure it says "not an address": a parameter handed to a `.func` call, stored to memory
//! or compared is not followed. At most [`MAX_TRACKED`] parameters are tracked, and the fixpoint
//! stops after [`MAX_PASSES`] passes (nvcc's loops settle in two or three); past either, what is
//! not yet found is reported as not an address.

use std::collections::HashMap;

use crate::ast::{Function, Operand, Stmt};

/// Parameters tracked per kernel: one bit each.
pub(crate) const MAX_TRACKED: usize = 128;

/// Passes over the body before the fixpoint is given up.
pub(crate) const MAX_PASSES: usize = 64;

/// The parameters a register's value may be based on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Provenance {
    /// Through `cvta.to.global`: certainly an address.
    strong: u128,
    /// Loaded from a parameter, moved or added, not yet known to be an address.
    weak: u128,
}

impl Provenance {
    fn all(self) -> u128 {
        self.strong | self.weak
    }

    fn is_empty(self) -> bool {
        self.all() == 0
    }
}

/// For each of `f`'s parameters, in order, whether the body uses it as a global memory address.
/// Only 8-byte scalar parameters can be; every other entry is `false`. A function without a
/// body (or parsed without bodies) uses none.
pub(crate) fn address_params(f: &Function) -> Vec<bool> {
    let mut used = vec![false; f.params.len()];
    let Some(body) = &f.body else {
        return used;
    };
    // Bit i of a provenance set stands for parameter `tracked[i]`.
    let tracked: Vec<usize> = f
        .params
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            matches!(p.ty.as_str(), "u64" | "s64" | "b64") && p.dims.is_empty() && p.vec == 1
        })
        .map(|(i, _)| i)
        .take(MAX_TRACKED)
        .collect();
    if tracked.is_empty() {
        return used;
    }
    let bit_of: HashMap<&str, u128> = tracked
        .iter()
        .enumerate()
        .map(|(bit, &i)| (f.params[i].name.as_str(), 1u128 << bit))
        .collect();
    let insts: Vec<(&str, &[Operand])> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Inst(i) => Some((i.opcode.as_str(), i.operands.as_slice())),
            _ => None,
        })
        .collect();

    let mut regs: HashMap<&str, Provenance> = HashMap::new();
    let mut addressed = 0u128;
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for &(opcode, ops) in &insts {
            let before = addressed;
            addressed |= addresses(opcode, ops, &regs);
            changed |= addressed != before;
            if let Some((dest, flow)) = flow(opcode, ops, &regs, &bit_of) {
                if flow.is_empty() {
                    continue;
                }
                let slot = regs.entry(dest).or_default();
                let merged = Provenance {
                    strong: slot.strong | flow.strong,
                    weak: slot.weak | flow.weak,
                };
                if merged != *slot {
                    *slot = merged;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (bit, &i) in tracked.iter().enumerate() {
        used[i] = addressed & (1u128 << bit) != 0;
    }
    used
}

/// The words of an opcode after its name: `ld.global.nc.u64` → `global`, `nc`, `u64`.
fn modifiers(opcode: &str) -> impl Iterator<Item = &str> {
    opcode.split('.').skip(1)
}

/// A PTX type word (`u64`, `f32`, `bf16`), not a rounding or other modifier (`rn`, `ftz`).
fn is_type_word(m: &str) -> bool {
    let digits = m.trim_start_matches(['u', 's', 'f', 'b']);
    digits.len() < m.len() && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn name(op: &Operand) -> Option<&str> {
    match op {
        Operand::Name(n) => Some(n),
        _ => None,
    }
}

fn of(regs: &HashMap<&str, Provenance>, op: Option<&Operand>) -> Provenance {
    op.and_then(name)
        .and_then(|n| regs.get(n))
        .copied()
        .unwrap_or_default()
}

/// The parameters whose values `opcode` uses as global (or generic) addresses: the bases of its
/// `[reg+offset]` operands, for an instruction that reaches memory in those spaces.
fn addresses(opcode: &str, ops: &[Operand], regs: &HashMap<&str, Provenance>) -> u128 {
    let op = opcode.split('.').next().unwrap_or("");
    if !matches!(
        op,
        "ld" | "ldu" | "st" | "atom" | "red" | "cp" | "prefetch" | "prefetchu" | "multimem"
    ) {
        return 0;
    }
    let mut global = false;
    let mut other_space = false;
    for m in modifiers(opcode) {
        match m {
            "global" => global = true,
            "shared" | "local" | "const" | "param" => other_space = true,
            _ => {}
        }
    }
    // Without a state space an access is generic, and a global address works there too;
    // `cp.async.ca.shared.global` names both of its spaces.
    if !global && other_space {
        return 0;
    }
    ops.iter()
        .filter_map(|o| match o {
            Operand::Addr(Some(base), _) => regs.get(base.as_str()),
            _ => None,
        })
        .fold(0, |acc, p| acc | p.all())
}

/// The register `opcode` writes and the provenance it passes to it, for the instructions that
/// pass one; `None` for every other (their results are based on no parameter).
fn flow<'a>(
    opcode: &str,
    ops: &'a [Operand],
    regs: &HashMap<&str, Provenance>,
    params: &HashMap<&str, u128>,
) -> Option<(&'a str, Provenance)> {
    let dest = name(ops.first()?)?;
    let src = |i: usize| of(regs, ops.get(i));
    let op = opcode.split('.').next().unwrap_or("");
    let wide = |ty: &str| matches!(ty, "u64" | "s64" | "b64");
    let flow = match op {
        // A parameter loaded whole: the start of every chain.
        "ld" => {
            let is_param = modifiers(opcode).any(|m| m == "param");
            if !is_param || !modifiers(opcode).any(wide) {
                return None;
            }
            let Some(Operand::Addr(Some(sym), 0)) = ops.get(1) else {
                return None;
            };
            Provenance {
                strong: 0,
                weak: *params.get(sym.as_str())?,
            }
        }
        "mov" => src(1),
        // To a global address: certainly an address from here on. To a generic one: as it was.
        // To the shared, local or constant window: no longer a global address.
        "cvta" => {
            let p = src(1);
            let mut words = modifiers(opcode);
            match (words.next(), words.next()) {
                (Some("to"), Some("global")) => Provenance {
                    strong: p.all(),
                    weak: 0,
                },
                (Some("to"), _) => return None,
                _ => p,
            }
        }
        // Between 64-bit types only: a narrowing conversion cannot carry an address.
        "cvt" => {
            let types: Vec<&str> = modifiers(opcode).filter(|m| is_type_word(m)).collect();
            if types.len() == 2 && types.iter().all(|t| wide(t)) {
                src(1)
            } else {
                return None;
            }
        }
        "add" => {
            let (a, b) = (src(1), src(2));
            let strong = a.strong | b.strong;
            if strong != 0 {
                Provenance { strong, weak: 0 }
            } else {
                Provenance {
                    strong: 0,
                    weak: a.weak | b.weak,
                }
            }
        }
        // `p - n` is based on `p`.
        "sub" => src(1),
        // d = a * b + c: the addend is the base.
        "mad" => src(3),
        "selp" => {
            let (a, b) = (src(1), src(2));
            Provenance {
                strong: a.strong | b.strong,
                weak: a.weak | b.weak,
            }
        }
        _ => return None,
    };
    Some((dest, flow))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{lexer, parser};

    /// `address_params` of the one function in `ptx`'s module, whose parameters and body are
    /// given.
    fn used(params: &str, body: &str) -> Vec<bool> {
        let ptx = format!(
            ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k({params})\n{{\n{body}\n}}\n"
        );
        let toks = lexer::lex(&ptx).expect("lexes");
        let m = parser::parse(&toks).expect("parses");
        address_params(&m.funcs[0])
    }

    const TWO: &str = ".param .u64 p, .param .u64 n";

    #[test]
    fn a_pointer_through_cvta_and_a_scaled_index_is_the_pointer_alone() {
        // What nvcc writes for `out[n] = 1`.
        let body = "ld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [n];\ncvta.to.global.u64 %rd3, %rd1;\n\
                    shl.b64 %rd4, %rd2, 2;\nadd.s64 %rd5, %rd3, %rd4;\nst.global.u32 [%rd5], 1;\nret;";
        assert_eq!(used(TWO, body), [true, false]);
    }

    #[test]
    fn an_unscaled_index_added_to_a_cvta_pointer_is_not_an_address() {
        // `char* p; p[n]`.
        let body =
            "ld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [n];\ncvta.to.global.u64 %rd3, %rd1;\n\
                    add.s64 %rd5, %rd3, %rd2;\nld.global.u8 %rs1, [%rd5];\nret;";
        assert_eq!(used(TWO, body), [true, false]);
    }

    #[test]
    fn mad_wide_keeps_its_addend_and_movs_pass_through() {
        let body = "ld.param.u64 %rd1, [p];\nmov.b64 %rd2, %rd1;\ncvta.to.global.u64 %rd3, %rd2;\n\
                    mad.wide.s32 %rd4, %r1, 4, %rd3;\natom.global.add.u32 %r2, [%rd4+8], 1;\nret;";
        assert_eq!(used(TWO, body), [true, false]);
        // The multiplicands of a mad are indices even when they come from a parameter.
        let body =
            "ld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [n];\ncvta.to.global.u64 %rd3, %rd1;\n\
                    mad.lo.s64 %rd4, %rd2, 8, %rd3;\nst.global.u64 [%rd4], %rd2;\nret;";
        assert_eq!(used(TWO, body), [true, false]);
    }

    #[test]
    fn generic_accesses_count_and_other_spaces_do_not() {
        let body = "ld.param.u64 %rd1, [p];\nld.u32 %r1, [%rd1];\nret;";
        assert_eq!(used(TWO, body), [true, false]);
        for space in ["shared", "local", "const"] {
            let body = format!("ld.param.u64 %rd1, [p];\nld.{space}.u32 %r1, [%rd1];\nret;");
            assert_eq!(used(TWO, &body), [false, false], "{space}");
        }
        // Through cvta to the local window: a local address, not a global one.
        let body =
            "ld.param.u64 %rd1, [p];\ncvta.to.local.u64 %rd2, %rd1;\nst.u32 [%rd2], 1;\nret;";
        assert_eq!(used(TWO, body), [false, false]);
    }

    #[test]
    fn without_cvta_both_sides_of_an_addition_may_be_the_base() {
        // Hand-written PTX: nothing says which of the two is the pointer.
        let body = "ld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [n];\nadd.s64 %rd3, %rd1, %rd2;\n\
                    st.global.u32 [%rd3], 1;\nret;";
        assert_eq!(used(TWO, body), [true, true]);
    }

    #[test]
    fn values_stored_compared_or_narrowed_are_not_addresses() {
        let body = "ld.param.u64 %rd1, [p];\nld.param.u64 %rd2, [n];\ncvta.to.global.u64 %rd3, %rd1;\n\
                    st.global.u64 [%rd3], %rd2;\nsetp.eq.s64 %p1, %rd2, 0;\ncvt.u32.u64 %r1, %rd2;\n\
                    ret;";
        assert_eq!(used(TWO, body), [true, false]);
        // A 64-bit conversion keeps it.
        let body =
            "ld.param.u64 %rd1, [n];\ncvt.s64.u64 %rd2, %rd1;\nld.global.u32 %r1, [%rd2];\nret;";
        assert_eq!(used(".param .u64 n", body), [true]);
    }

    #[test]
    fn a_loop_carried_pointer_is_found_in_any_order() {
        // The increment comes before its source in the text: found on the second pass.
        let body = "bra $L0;\n$L1:\nadd.s64 %rd4, %rd3, 4;\nst.global.u32 [%rd4], 1;\nret;\n$L0:\n\
                    ld.param.u64 %rd1, [n];\nmov.b64 %rd3, %rd1;\nbra $L1;";
        assert_eq!(used(".param .u64 n", body), [true]);
    }

    #[test]
    fn only_whole_64_bit_scalars_are_tracked() {
        let body =
            "ld.param.u32 %r1, [a];\nld.param.u64 %rd1, [s+8];\nld.global.u32 %r2, [%rd1];\nret;";
        assert_eq!(
            used(".param .u32 a, .param .align 8 .b8 s[16]", body),
            [false, false]
        );
        // cp.async names both spaces: the global source counts.
        let body = "ld.param.u64 %rd1, [p];\ncp.async.ca.shared.global [%r1], [%rd1], 16;\nret;";
        assert_eq!(used(TWO, body), [true, false]);
        // A parameter passed on to a function is not followed.
        let body = "ld.param.u64 %rd1, [p];\nst.param.b64 [param0], %rd1;\nret;";
        assert_eq!(used(TWO, body), [false, false]);
    }
}
