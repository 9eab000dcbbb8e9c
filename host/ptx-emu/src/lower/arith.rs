//! Integer, floating-point and predicate arithmetic: `add` … `max`, `mad`/`fma`, the unary ops
//! and transcendental approximations, bit-field ops, carry chains.

use super::function::FnLower;
use super::mods::Mods;
use super::types::{packed_half, parse_ty, K};
use crate::ast;
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn binary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 3)?;
        let base = md.base;
        let t = md.one_type()?;
        if t == "pred" {
            let op = match base {
                "and" => BoolOp::And,
                "or" => BoolOp::Or,
                "xor" => BoolOp::Xor,
                _ => return Err(md.err("not defined on .pred")),
            };
            return Ok(Op::PBool {
                op,
                d: self.dst(line, self.op(i, 0)?, K::Pred)?,
                a: self.psrc(line, self.op(i, 1)?)?,
                b: self.psrc(line, self.op(i, 2)?)?,
            });
        }
        if let Some(f) = packed_half(t) {
            let op = match base {
                "add" => F2::Add,
                "sub" => F2::Sub,
                "mul" => F2::Mul,
                "min" if md.has("NaN") => F2::MinNaN,
                "max" if md.has("NaN") => F2::MaxNaN,
                "min" => F2::Min,
                "max" => F2::Max,
                _ => return Err(md.err("unsupported on packed halves")),
            };
            let rnd = md.rnd().unwrap_or(Rnd::N);
            let ftz = md.has("ftz");
            let sat = md.has("sat");
            return Ok(Op::F2x2 {
                op,
                f,
                rnd,
                ftz,
                sat,
                d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                a: self.src(line, self.op(i, 1)?, K::Int(32))?,
                b: self.src(line, self.op(i, 2)?, K::Int(32))?,
            });
        }
        let ty = parse_ty(t).ok_or_else(|| md.err("bad type"))?;
        match ty {
            Ty::F(f) => {
                let op = match base {
                    "add" => F2::Add,
                    "sub" => F2::Sub,
                    "mul" => F2::Mul,
                    "div" => F2::Div,
                    "min" if md.has("NaN") => F2::MinNaN,
                    "max" if md.has("NaN") => F2::MaxNaN,
                    "min" => F2::Min,
                    "max" => F2::Max,
                    "copysign" => F2::Copysign,
                    _ => return Err(md.err("not defined on floating-point types")),
                };
                let approx = md.has("approx");
                let full = md.has("full");
                let rnd = md.rnd();
                let ftz = md.has("ftz");
                let sat = md.has("sat");
                md.has("xorsign");
                if op == F2::Div && rnd.is_none() && !approx && !full {
                    return Err(md.err("div needs a rounding mode, .approx or .full"));
                }
                if (approx || full) && (op != F2::Div || f != FT::F32) {
                    return Err(md.err(".approx/.full is only defined for div.f32 here"));
                }
                let op = if op == F2::Div && approx {
                    F2::DivApprox
                } else {
                    op
                };
                let k = K::F(f);
                Ok(Op::F2 {
                    op,
                    f,
                    rnd: rnd.unwrap_or(Rnd::N),
                    ftz,
                    sat,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                })
            }
            Ty::I(it) => {
                let k = K::Int(it.bits);
                let mut bk = k;
                let op = match base {
                    "add" if md.has("sat") => I2::AddSat,
                    "sub" if md.has("sat") => I2::SubSat,
                    "add" => I2::Add,
                    "sub" => I2::Sub,
                    "mul" | "mul24" => {
                        let mode = md
                            .one_of(&["lo", "hi", "wide"])
                            .ok_or_else(|| md.err("needs .lo, .hi or .wide"))?;
                        if base == "mul24" {
                            if mode == "wide" || it.bits != 32 {
                                return Err(md.err("mul24 takes .lo or .hi and a 32-bit type"));
                            }
                            if mode == "hi" {
                                I2::Mul24Hi
                            } else {
                                I2::Mul24Lo
                            }
                        } else if mode == "wide" {
                            if it.bits == 64 || it.bits == 8 {
                                return Err(md.err(".wide needs a 16- or 32-bit type"));
                            }
                            let d = self.dst(line, self.op(i, 0)?, K::Int(it.bits * 2))?;
                            return Ok(Op::MulWide {
                                t: it,
                                d,
                                a: self.src(line, self.op(i, 1)?, k)?,
                                b: self.src(line, self.op(i, 2)?, k)?,
                            });
                        } else if mode == "hi" {
                            I2::MulHi
                        } else {
                            I2::MulLo
                        }
                    }
                    "div" => I2::Div,
                    "rem" => I2::Rem,
                    "and" => I2::And,
                    "or" => I2::Or,
                    "xor" => I2::Xor,
                    "shl" | "shr" => {
                        bk = K::Int(32);
                        if base == "shl" {
                            I2::Shl
                        } else {
                            I2::Shr
                        }
                    }
                    "min" => I2::Min,
                    "max" => I2::Max,
                    _ => return Err(md.err("not defined on integer types")),
                };
                if matches!(op, I2::AddSat | I2::SubSat) && !(it.bits == 32 && it.signed) {
                    return Err(md.err(".sat needs .s32"));
                }
                md.has("relu");
                Ok(Op::Int2 {
                    op,
                    t: it,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, bk)?,
                })
            }
        }
    }

    pub(super) fn ternary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 4)?;
        let t = md.one_type()?;
        if let Some(f) = packed_half(t) {
            let rnd = md.rnd().unwrap_or(Rnd::N);
            let ftz = md.has("ftz");
            let sat = md.has("sat");
            md.has("relu");
            return Ok(Op::Fmax2 {
                f,
                rnd,
                ftz,
                sat,
                d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                a: self.src(line, self.op(i, 1)?, K::Int(32))?,
                b: self.src(line, self.op(i, 2)?, K::Int(32))?,
                c: self.src(line, self.op(i, 3)?, K::Int(32))?,
            });
        }
        let ty = parse_ty(t).ok_or_else(|| md.err("bad type"))?;
        match ty {
            Ty::F(f) => {
                let rnd = md.rnd();
                if rnd.is_none() && !(f == FT::F16 || f == FT::BF16) {
                    return Err(md.err("fma/mad on floats needs a rounding mode"));
                }
                let ftz = md.has("ftz");
                let sat = md.has("sat");
                md.has("relu");
                let k = K::F(f);
                Ok(Op::Fma {
                    f,
                    rnd: rnd.unwrap_or(Rnd::N),
                    ftz,
                    sat,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    c: self.src(line, self.op(i, 3)?, k)?,
                })
            }
            Ty::I(it) => {
                if md.base == "fma" {
                    return Err(md.err("fma needs a floating-point type"));
                }
                let mode = md
                    .one_of(&["lo", "hi", "wide"])
                    .ok_or_else(|| md.err("needs .lo, .hi or .wide"))?;
                let op = match (md.base, mode) {
                    ("mad24", "lo") if it.bits == 32 => I3::Mad24Lo,
                    ("mad24", "hi") if it.bits == 32 => I3::Mad24Hi,
                    ("mad24", _) => return Err(md.err("mad24 takes .lo or .hi and a 32-bit type")),
                    (_, "lo") if md.has("cc") => I3::MadLoCC,
                    (_, "lo") => I3::MadLo,
                    (_, "hi") => I3::MadHi,
                    _ => I3::MadWide,
                };
                if op == I3::MadLoCC {
                    return Err(md.err("carry-chain arithmetic is not supported"));
                }
                let k = K::Int(it.bits);
                let dk = if op == I3::MadWide {
                    if it.bits == 64 || it.bits == 8 {
                        return Err(md.err(".wide needs a 16- or 32-bit type"));
                    }
                    K::Int(it.bits * 2)
                } else {
                    k
                };
                Ok(Op::Int3 {
                    op,
                    t: it,
                    d: self.dst(line, self.op(i, 0)?, dk)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    c: self.src(line, self.op(i, 3)?, dk)?,
                })
            }
        }
    }

    pub(super) fn unary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let base = md.base;
        let shiftamt = base == "bfind" && md.has("shiftamt");
        let t = md.one_type()?;
        if t == "pred" {
            if base != "not" {
                return Err(md.err("not defined on .pred"));
            }
            return Ok(Op::PNot {
                d: self.dst(line, self.op(i, 0)?, K::Pred)?,
                a: self.psrc(line, self.op(i, 1)?)?,
            });
        }
        if packed_half(t).is_some() && matches!(base, "neg" | "abs") {
            md.has("ftz");
            // Sign-bit operations on both halves: an integer xor/and does it exactly.
            let (op, mask) = if base == "neg" {
                (I2::Xor, 0x8000_8000u64)
            } else {
                (I2::And, 0x7fff_7fffu64)
            };
            return Ok(Op::Int2 {
                op,
                t: IT {
                    bits: 32,
                    signed: false,
                },
                d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                a: self.src(line, self.op(i, 1)?, K::Int(32))?,
                b: Src::I(mask),
            });
        }
        let ty = parse_ty(t).ok_or_else(|| md.err("bad type"))?;
        match ty {
            Ty::F(f) => {
                let op = match base {
                    "neg" => F1::Neg,
                    "abs" => F1::Abs,
                    "sqrt" => F1::Sqrt,
                    "rcp" => F1::Rcp,
                    "rsqrt" => F1::Rsqrt,
                    "sin" => F1::Sin,
                    "cos" => F1::Cos,
                    "ex2" => F1::Ex2,
                    "lg2" => F1::Lg2,
                    "tanh" => F1::Tanh,
                    _ => return Err(md.err("not defined on floating-point types")),
                };
                let approx = md.has("approx");
                let rnd = md.rnd();
                let ftz = md.has("ftz");
                let sat = md.has("sat");
                let needs_approx = matches!(
                    op,
                    F1::Sin | F1::Cos | F1::Ex2 | F1::Lg2 | F1::Tanh | F1::Rsqrt
                );
                if needs_approx && !approx {
                    return Err(md.err("needs .approx"));
                }
                if matches!(op, F1::Sqrt | F1::Rcp) && !approx && rnd.is_none() {
                    return Err(md.err("needs a rounding mode or .approx"));
                }
                if matches!(f, FT::F16 | FT::BF16)
                    && !matches!(op, F1::Neg | F1::Abs | F1::Ex2 | F1::Tanh)
                {
                    return Err(md.err("not supported on half types"));
                }
                let k = K::F(f);
                Ok(Op::F1 {
                    op,
                    f,
                    rnd: rnd.unwrap_or(Rnd::N),
                    ftz,
                    sat,
                    approx,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                })
            }
            Ty::I(it) => {
                let op = match base {
                    "not" => I1::Not,
                    "cnot" => I1::CNot,
                    "neg" => I1::Neg,
                    "abs" => I1::Abs,
                    "popc" => I1::Popc,
                    "clz" => I1::Clz,
                    "brev" => I1::Brev,
                    "bfind" if shiftamt => I1::BfindShift,
                    "bfind" => I1::Bfind,
                    _ => return Err(md.err("not defined on integer types")),
                };
                let dk = if matches!(op, I1::Popc | I1::Clz | I1::Bfind | I1::BfindShift) {
                    K::Int(32)
                } else {
                    K::Int(it.bits)
                };
                Ok(Op::Int1 {
                    op,
                    t: it,
                    d: self.dst(line, self.op(i, 0)?, dk)?,
                    a: self.src(line, self.op(i, 1)?, K::Int(it.bits))?,
                })
            }
        }
    }

    pub(super) fn bits3(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let base = md.base;
        let (op, t) = match base {
            "bfe" => {
                let t = md.one_type()?;
                (I3::Bfe, md.int_ty(t)?)
            }
            "prmt" => {
                if md
                    .one_of(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
                    .is_some()
                {
                    return Err(md.err("prmt modes are not supported"));
                }
                let t = md.one_type()?;
                (I3::Prmt, md.int_ty(t)?)
            }
            "shf" => {
                let right = match md.one_of(&["l", "r"]) {
                    Some("l") => 0,
                    Some(_) => 1,
                    None => return Err(md.err("needs .l or .r")),
                };
                let clamp = match md.one_of(&["wrap", "clamp"]) {
                    Some("wrap") => 0,
                    Some(_) => 2,
                    None => return Err(md.err("needs .wrap or .clamp")),
                };
                let t = md.one_type()?;
                (I3::Shf(right | clamp), md.int_ty(t)?)
            }
            "szext" => {
                let m = md
                    .one_of(&["clamp", "wrap"])
                    .ok_or_else(|| md.err("needs .clamp or .wrap"))?;
                let t = md.one_type()?;
                let t = md.int_ty(t)?;
                (
                    I3::Szext,
                    IT {
                        bits: if m == "clamp" { 33 } else { 32 },
                        signed: t.signed,
                    },
                )
            }
            _ => {
                let op = if base == "dp2a" {
                    match md.one_of(&["lo", "hi"]) {
                        Some(m) => I3::Dp2a(m == "hi"),
                        None => return Err(md.err("dp2a needs .lo or .hi")),
                    }
                } else {
                    I3::Dp4a
                };
                let tys = md.types();
                if tys.len() != 2 || tys.iter().any(|t| *t != "u32" && *t != "s32") {
                    return Err(md.err(&format!("{base} needs two types, each .u32 or .s32")));
                }
                let s = (tys[0] == "s32") as u8 | (((tys[1] == "s32") as u8) << 1);
                self.nops(i, 4)?;
                return Ok(Op::Int3 {
                    op,
                    t: IT {
                        bits: 32 + s,
                        signed: false,
                    },
                    d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                    a: self.src(line, self.op(i, 1)?, K::Int(32))?,
                    b: self.src(line, self.op(i, 2)?, K::Int(32))?,
                    c: self.src(line, self.op(i, 3)?, K::Int(32))?,
                });
            }
        };
        let nops = if op == I3::Szext { 3 } else { 4 };
        self.nops(i, nops)?;
        let k = K::Int(t.bits.min(64));
        let c = if nops == 4 {
            self.src(line, self.op(i, 3)?, K::Int(32))?
        } else {
            Src::I(0)
        };
        Ok(Op::Int3 {
            op,
            t,
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, K::Int(32))?,
            c,
        })
    }

    pub(super) fn carry(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let base = md.base;
        let cout = md.has("cc");
        let cin = base.ends_with('c');
        let kind = match base {
            "add" | "addc" => CarryKind::Add,
            "sub" | "subc" => CarryKind::Sub,
            _ => match md.one_of(&["lo", "hi"]) {
                Some("lo") => CarryKind::MadLo,
                Some(_) => CarryKind::MadHi,
                None => return Err(md.err("needs .lo or .hi")),
            },
        };
        let t = md.one_type()?;
        let bits = match t {
            "u32" | "s32" | "b32" => 32,
            "u64" | "s64" | "b64" => 64,
            _ => return Err(md.err("carry arithmetic takes 32- or 64-bit integer types")),
        };
        let k = K::Int(bits);
        let is_mad = matches!(kind, CarryKind::MadLo | CarryKind::MadHi);
        self.nops(i, if is_mad { 4 } else { 3 })?;
        Ok(Op::Carry {
            kind,
            bits,
            cin,
            cout,
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, k)?,
            c: if is_mad {
                self.src(line, self.op(i, 3)?, k)?
            } else {
                Src::I(0)
            },
        })
    }

    pub(super) fn sad(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 4)?;
        let t = md.one_type()?;
        let t = md.int_ty(t)?;
        let k = K::Int(t.bits);
        Ok(Op::Int3 {
            op: I3::Sad,
            t,
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, k)?,
            c: self.src(line, self.op(i, 3)?, k)?,
        })
    }

    pub(super) fn bfi(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 5)?;
        let t = md.one_type()?;
        let t = md.int_ty(t)?;
        let k = K::Int(t.bits);
        Ok(Op::Bfi {
            t,
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, k)?,
            c: self.src(line, self.op(i, 3)?, K::Int(32))?,
            e: self.src(line, self.op(i, 4)?, K::Int(32))?,
        })
    }
}
