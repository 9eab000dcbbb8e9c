//! Memory access: `ld`, `st`, `cvta` and the atomics (`atom`, `red`), each checked against the
//! state space of the symbol it names.

use super::err;
use super::function::FnLower;
use super::mods::Mods;
use super::types::{kind_of, parse_ty, type_size, K};
use crate::ast::{self, Operand};
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn ld(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let sp = md.space().unwrap_or(if md.base == "ldu" {
            Space::Global
        } else {
            Space::Generic
        });
        md.has("cta");
        md.one_of(&["shared::cta", "shared::cluster"]);
        let acquire = ordered(md, "acquire");
        md.ignore_mem_hints();
        let (n, t, size, k) = access_width(md)?;
        let sign = t.starts_with('s');
        let mut d = [None; 4];
        match (self.op(i, 0)?, n) {
            (Operand::Vec(parts), n) if parts.len() == n => {
                for (k2, p) in parts.iter().enumerate() {
                    d[k2] = match p {
                        Operand::Sink => None,
                        p => Some(self.dst(line, p, k)?),
                    };
                }
            }
            (o, 1) => d[0] = Some(self.dst(line, o, k)?),
            _ => return Err(md.err("destination does not match the vector width")),
        }
        let (addr, sym_sp) = self.addr(line, self.op(i, 1)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        Ok(Op::Ld {
            sp,
            size: size as u8,
            sign,
            n: n as u8,
            d,
            addr,
            acquire,
        })
    }

    /// A symbol's own space must agree with the instruction's (a generic access to a symbol uses
    /// the symbol's generic address instead).
    pub(super) fn check_space(
        &self,
        line: u32,
        sp: Space,
        sym: Option<Space>,
    ) -> Result<Space, LoadError> {
        match sym {
            None => Ok(sp),
            Some(s) if s == sp => Ok(sp),
            Some(Space::Global) if sp == Space::Const || sp == Space::Generic => Ok(sp),
            Some(Space::Const) if sp == Space::Global || sp == Space::Generic => Ok(sp),
            Some(s) => Err(err(
                line,
                format!("symbol in {s:?} space accessed as {sp:?}"),
            )),
        }
    }

    pub(super) fn st(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let sp = md.space().unwrap_or(Space::Generic);
        if sp == Space::Const {
            return Err(md.err("cannot store to .const"));
        }
        md.one_of(&["shared::cta", "shared::cluster"]);
        let release = ordered(md, "release");
        md.ignore_mem_hints();
        let (n, _, size, k) = access_width(md)?;
        let mut s = [Src::I(0); 4];
        match (self.op(i, 1)?, n) {
            (Operand::Vec(parts), n) if parts.len() == n => {
                for (k2, p) in parts.iter().enumerate() {
                    s[k2] = self.src(line, p, k)?;
                }
            }
            (o, 1) => s[0] = self.src(line, o, k)?,
            _ => return Err(md.err("source does not match the vector width")),
        }
        let (addr, sym_sp) = self.addr(line, self.op(i, 0)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        Ok(Op::St {
            sp,
            size: size as u8,
            n: n as u8,
            s,
            addr,
            release,
        })
    }

    pub(super) fn cvta(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let to = md.has("to");
        let sp = md.space().ok_or_else(|| md.err("missing state space"))?;
        let t = md.one_type()?;
        let bits = match t {
            "u64" | "b64" => 64,
            "u32" | "b32" => 32,
            _ => return Err(md.err("cvta takes .u32 or .u64")),
        };
        let it = IT {
            bits,
            signed: false,
        };
        let d = self.dst(line, self.op(i, 0)?, K::Int(bits))?;
        // A symbol operand is its state-space address.
        let a = self.src(line, self.op(i, 1)?, K::Int(bits))?;
        let win = sp.generic_base();
        Ok(if win == 0 {
            Op::Mov { d, a }
        } else if to {
            Op::Int2 {
                op: I2::Sub,
                t: it,
                d,
                a,
                b: Src::I(win),
            }
        } else {
            Op::Int2 {
                op: I2::Add,
                t: it,
                d,
                a,
                b: Src::I(win),
            }
        })
    }

    pub(super) fn atom(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let is_red = md.base == "red";
        let sp = md.space().unwrap_or(Space::Generic);
        if !matches!(sp, Space::Generic | Space::Global | Space::Shared) {
            return Err(md.err("atomics work on global, shared or generic addresses"));
        }
        md.ignore_mem_hints();
        md.has("noftz");
        let op = match md.one_of(&[
            "add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas",
        ]) {
            Some("add") => AtomOp::Add,
            Some("min") => AtomOp::Min,
            Some("max") => AtomOp::Max,
            Some("inc") => AtomOp::Inc,
            Some("dec") => AtomOp::Dec,
            Some("and") => AtomOp::And,
            Some("or") => AtomOp::Or,
            Some("xor") => AtomOp::Xor,
            Some("exch") => AtomOp::Exch,
            Some(_) => AtomOp::Cas,
            None => return Err(md.err("missing atomic operation")),
        };
        let t = match md.one_type()? {
            "u32" => AtomTy::U32,
            "s32" => AtomTy::S32,
            "u64" => AtomTy::U64,
            "s64" => AtomTy::S64,
            "b32" => AtomTy::B32,
            "b64" => AtomTy::B64,
            "f32" => AtomTy::F32,
            "f64" => AtomTy::F64,
            "f16" => AtomTy::F16,
            "f16x2" => AtomTy::F16x2,
            "bf16" => AtomTy::BF16,
            "bf16x2" => AtomTy::BF16x2,
            _ => return Err(md.err("unsupported atomic type")),
        };
        let float = matches!(
            t,
            AtomTy::F32 | AtomTy::F64 | AtomTy::F16 | AtomTy::F16x2 | AtomTy::BF16 | AtomTy::BF16x2
        );
        let ok = match op {
            AtomOp::Add => !matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Min | AtomOp::Max => !float && !matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Inc | AtomOp::Dec => t == AtomTy::U32,
            AtomOp::And | AtomOp::Or | AtomOp::Xor => matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Exch | AtomOp::Cas => matches!(
                t,
                AtomTy::B32 | AtomTy::B64 | AtomTy::U32 | AtomTy::U64 | AtomTy::S32 | AtomTy::S64
            ),
        };
        if !ok
            || (matches!(
                t,
                AtomTy::F16 | AtomTy::BF16 | AtomTy::F16x2 | AtomTy::BF16x2
            ) && op != AtomOp::Add)
        {
            return Err(md.err("operation not defined for this type"));
        }
        let bits = t.bits();
        let k = match t {
            AtomTy::F32 => K::F(FT::F32),
            AtomTy::F64 => K::F(FT::F64),
            _ => K::Int(bits),
        };
        let first = if is_red { 0 } else { 1 };
        let n = first + 2 + (op == AtomOp::Cas) as usize;
        self.nops(i, n)?;
        let d = if is_red {
            None
        } else {
            Some(self.dst(line, self.op(i, 0)?, k)?)
        };
        let (addr, sym_sp) = self.addr(line, self.op(i, first)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        let b = self.src(line, self.op(i, first + 1)?, k)?;
        let c = if op == AtomOp::Cas {
            self.src(line, self.op(i, first + 2)?, k)?
        } else {
            Src::I(0)
        };
        Ok(Op::Atom {
            sp,
            op,
            t,
            d,
            addr,
            b,
            c,
        })
    }
}

/// The vector width and element type of a load or store: (elements, type word, element bytes,
/// the kind of value each element register holds).
fn access_width<'a>(md: &mut Mods<'a>) -> Result<(usize, &'a str, u32, K), LoadError> {
    let n = match md.one_of(&["v2", "v4"]) {
        Some("v2") => 2,
        Some(_) => 4,
        None => 1,
    };
    let t = md.one_type()?;
    if t == "pred" || t == "b128" {
        return Err(md.err("unsupported type"));
    }
    let size = type_size(t).ok_or_else(|| md.err("bad type"))?;
    let k = parse_ty(t).map(kind_of).unwrap_or(K::Int(size as u8 * 8));
    Ok((n, t, size, k))
}

/// Whether a load or store orders the accesses around it: `sem` (`acquire` for loads, `release`
/// for stores) or `volatile`. PTX makes `volatile` a relaxed access at system scope, but CUDA
/// code polls through volatile pointers and expects what it then reads to be there (a GPU's
/// volatile accesses are not reordered with the others of their thread): the emulator gives
/// `volatile` the stronger order too, which costs nothing on x86 (where both are plain moves).
fn ordered(md: &mut Mods<'_>, sem: &str) -> bool {
    let volatile = md.has("volatile");
    md.has(sem) || volatile
}

/// `membar`/`fence`: a real sequentially consistent fence. Every access is an atomic of its width,
/// but relaxed: without the fence, the host (another thread, or another process on mapped memory)
/// could see a kernel's stores in another order than the kernel fenced them in, or the kernel
/// the host's. Any scope gets the fence, `.cta` too (its CTA runs on one OS thread, so that one
/// is for free on x86 but for the instruction).
pub(super) fn fence(md: &mut Mods<'_>) -> Op {
    md.one_of(&["cta", "gl", "sys", "gpu", "cluster"]);
    md.one_of(&["sc", "acq_rel", "acquire", "release"]);
    md.has("proxy");
    md.has("async");
    Op::Fence
}
