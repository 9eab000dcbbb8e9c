//! Moves and conversions: `mov` (with vector pack/unpack, `%clock` and `%envregN`) and `cvt`.

use super::function::FnLower;
use super::mods::Mods;
use super::types::{ft_bits, kind_of, packed_half, parse_ty, type_size, K};
use crate::ast::{self, Operand};
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn mov(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let t = md.one_type()?;
        let d = self.op(i, 0)?;
        let s = self.op(i, 1)?;
        if t == "pred" {
            return Ok(Op::MovP {
                d: self.dst(line, d, K::Pred)?,
                a: self.psrc(line, s)?,
            });
        }
        let size = type_size(t).ok_or_else(|| md.err("bad type"))? * 8;
        let k = match parse_ty(t) {
            Some(ty) => kind_of(ty),
            None => K::Int(size as u8),
        };
        if let Some(n) = name_of(s).and_then(envreg_index) {
            if size != 32 {
                return Err(md.err("`%envregN` is a 32-bit register: read it with mov.b32"));
            }
            return Ok(Op::EnvReg {
                d: self.dst(line, d, k)?,
                n,
            });
        }
        match (d, s) {
            (Operand::Vec(parts), _) => {
                if parts.len() != 2 && parts.len() != 4 || size > 64 {
                    return Err(md.err("unpack needs 2 or 4 parts"));
                }
                let bits = size as usize / parts.len();
                let mut ds = [None; 4];
                for (k2, p) in parts.iter().enumerate() {
                    ds[k2] = match p {
                        Operand::Sink => None,
                        p => Some(self.dst(line, p, K::Int(bits as u8))?),
                    };
                }
                Ok(Op::Unpack {
                    d: ds,
                    n: parts.len() as u8,
                    bits: bits as u8,
                    a: self.src(line, s, K::Int(size as u8))?,
                })
            }
            (_, Operand::Vec(parts)) => {
                if parts.len() != 2 && parts.len() != 4 || size > 64 {
                    return Err(md.err("pack needs 2 or 4 parts"));
                }
                let bits = size as usize / parts.len();
                let mut a = [Src::I(0); 4];
                for (k2, p) in parts.iter().enumerate() {
                    a[k2] = self.src(line, p, K::Int(bits as u8))?;
                }
                Ok(Op::Pack {
                    d: self.dst(line, d, K::Int(size as u8))?,
                    a,
                    n: parts.len() as u8,
                    bits: bits as u8,
                })
            }
            (_, Operand::Name(n)) if n == "%clock" || n == "%clock64" => Ok(Op::Clock {
                d: self.dst(line, d, k)?,
                bits: if n == "%clock" { 32 } else { 64 },
            }),
            _ => Ok(Op::Mov {
                d: self.dst(line, d, k)?,
                a: self.src(line, s, k)?,
            }),
        }
    }

    pub(super) fn cvt(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let irnd = md.int_rnd();
        let rnd = md.rnd();
        let ftz = md.has("ftz");
        let sat = md.has("sat");
        md.has("relu");
        let tys = md.types();
        if tys.len() != 2 {
            return Err(md.err("cvt needs a destination and a source type"));
        }
        if let Some(f) = packed_half(tys[0]) {
            self.nops(i, 3)?;
            if tys[1] != "f32" {
                return Err(md.err("packed conversion needs .f32 sources"));
            }
            return Ok(Op::CvtPack {
                f,
                rnd: rnd.ok_or_else(|| md.err("needs a rounding mode"))?,
                d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                a: self.src(line, self.op(i, 1)?, K::F(FT::F32))?,
                b: self.src(line, self.op(i, 2)?, K::F(FT::F32))?,
            });
        }
        self.nops(i, 2)?;
        let dt = parse_ty(tys[0]).ok_or_else(|| md.err("bad destination type"))?;
        let st = parse_ty(tys[1]).ok_or_else(|| md.err("bad source type"))?;
        // Which rounding modifiers PTX requires/permits depends on the pair of types.
        let (r, int_rnd) = match (dt, st) {
            (Ty::I(_), Ty::I(_)) => {
                if rnd.is_some() || irnd.is_some() {
                    return Err(md.err("integer conversions take no rounding mode"));
                }
                (None, false)
            }
            (Ty::I(_), Ty::F(_)) => {
                if rnd.is_some() {
                    return Err(md.err("float-to-integer conversions need .rni/.rzi/.rmi/.rpi"));
                }
                (
                    Some(irnd.ok_or_else(|| {
                        md.err("float-to-integer conversions need .rni/.rzi/.rmi/.rpi")
                    })?),
                    true,
                )
            }
            (Ty::F(_), Ty::I(_)) => {
                if irnd.is_some() {
                    return Err(md.err("integer-to-float conversions need .rn/.rz/.rm/.rp"));
                }
                (
                    Some(rnd.ok_or_else(|| {
                        md.err("integer-to-float conversions need .rn/.rz/.rm/.rp")
                    })?),
                    false,
                )
            }
            (Ty::F(d), Ty::F(s)) => {
                if irnd.is_some() {
                    if d != s {
                        return Err(md.err("integer rounding needs equal float types"));
                    }
                    (irnd, true)
                } else if ft_bits(d) < ft_bits(s) || (ft_bits(d) == ft_bits(s) && d != s) {
                    (
                        Some(rnd.ok_or_else(|| {
                            md.err("narrowing float conversions need a rounding mode")
                        })?),
                        false,
                    )
                } else {
                    (rnd, false)
                }
            }
        };
        Ok(Op::Cvt {
            dt,
            st,
            rnd: r,
            int_rnd,
            ftz,
            sat,
            d: self.dst(line, self.op(i, 0)?, kind_of(dt))?,
            a: self.src(line, self.op(i, 1)?, kind_of(st))?,
        })
    }
}

/// The name an operand is, if it is one.
fn name_of(o: &Operand) -> Option<&str> {
    match o {
        Operand::Name(n) => Some(n),
        _ => None,
    }
}
