//! Comparisons and selection: `setp`, `set`, `selp`, `slct`, `testp`.

use super::function::FnLower;
use super::mods::Mods;
use super::types::{kind_of, parse_ty, K};
use crate::ast::{self, Operand};
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn setp(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let cmp = match md.one_of(&[
            "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu",
            "gtu", "geu", "num", "nan",
        ]) {
            Some("eq") => Cmp::Eq,
            Some("ne") => Cmp::Ne,
            Some("lt") | Some("lo") => Cmp::Lt,
            Some("le") | Some("ls") => Cmp::Le,
            Some("gt") | Some("hi") => Cmp::Gt,
            Some("ge") | Some("hs") => Cmp::Ge,
            Some("equ") => Cmp::Equ,
            Some("neu") => Cmp::Neu,
            Some("ltu") => Cmp::Ltu,
            Some("leu") => Cmp::Leu,
            Some("gtu") => Cmp::Gtu,
            Some("geu") => Cmp::Geu,
            Some("num") => Cmp::Num,
            Some(_) => Cmp::Nan,
            None => return Err(md.err("missing comparison")),
        };
        let unsigned_cmp = md
            .list
            .iter()
            .any(|m| matches!(*m, "lo" | "ls" | "hi" | "hs"));
        let comb = md.one_of(&["and", "or", "xor"]).map(|b| match b {
            "and" => BoolOp::And,
            "or" => BoolOp::Or,
            _ => BoolOp::Xor,
        });
        let ftz = md.has("ftz");
        let tys = md.types();
        let (dt, st) = match (md.base, tys.as_slice()) {
            ("setp", [s]) => (None, *s),
            ("set", [d, s]) => (Some(*d), *s),
            _ => return Err(md.err("wrong number of types")),
        };
        let mut t = parse_ty(st).ok_or_else(|| md.err("bad type"))?;
        if let Ty::I(it) = &mut t {
            if unsigned_cmp {
                it.signed = false;
            }
            if !matches!(
                cmp,
                Cmp::Eq | Cmp::Ne | Cmp::Lt | Cmp::Le | Cmp::Gt | Cmp::Ge
            ) {
                return Err(md.err("unordered comparisons need a float type"));
            }
        }
        let nops = 3 + comb.is_some() as usize;
        self.nops(i, nops)?;
        let comb = match comb {
            Some(b) => Some((b, self.psrc(line, self.op(i, 3)?)?)),
            None => None,
        };
        let k = kind_of(t);
        let a = self.src(line, self.op(i, 1)?, k)?;
        let b = self.src(line, self.op(i, 2)?, k)?;
        if let Some(dt) = dt {
            let float_out = dt == "f32";
            if !matches!(dt, "u32" | "s32" | "b32" | "f32") {
                return Err(md.err("set needs a 32-bit destination type"));
            }
            return Ok(Op::Set {
                t,
                cmp,
                ftz,
                float_out,
                d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                a,
                b,
                comb,
            });
        }
        let (d, d2) = match self.op(i, 0)? {
            Operand::Pair(x, y) => (self.pdst_opt(line, x)?, self.pdst_opt(line, y)?),
            o => (self.pdst_opt(line, o)?, None),
        };
        Ok(Op::Setp {
            t,
            cmp,
            ftz,
            d,
            d2,
            a,
            b,
            comb,
        })
    }

    pub(super) fn selp(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 4)?;
        let t = parse_ty(md.one_type()?).ok_or_else(|| md.err("bad type"))?;
        let k = kind_of(t);
        Ok(Op::Selp {
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, k)?,
            p: self.psrc(line, self.op(i, 3)?)?,
        })
    }

    pub(super) fn slct(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 4)?;
        let ftz = md.has("ftz");
        let tys = md.types();
        let (dt, ct) = match tys.as_slice() {
            [d, c] => (parse_ty(d), parse_ty(c)),
            _ => return Err(md.err("expects two types")),
        };
        let (Some(dt), Some(ct)) = (dt, ct) else {
            return Err(md.err("bad type"));
        };
        let k = kind_of(dt);
        Ok(Op::Slct {
            t: ct,
            ftz,
            d: self.dst(line, self.op(i, 0)?, k)?,
            a: self.src(line, self.op(i, 1)?, k)?,
            b: self.src(line, self.op(i, 2)?, k)?,
            c: self.src(line, self.op(i, 3)?, kind_of(ct))?,
        })
    }

    pub(super) fn testp(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let kind = match md.one_of(&[
            "finite",
            "infinite",
            "number",
            "notanumber",
            "normal",
            "subnormal",
        ]) {
            Some("finite") => TestpKind::Finite,
            Some("infinite") => TestpKind::Infinite,
            Some("number") => TestpKind::Number,
            Some("notanumber") => TestpKind::NotANumber,
            Some("normal") => TestpKind::Normal,
            Some(_) => TestpKind::Subnormal,
            None => return Err(md.err("missing test")),
        };
        let f = match md.one_type()? {
            "f32" => FT::F32,
            "f64" => FT::F64,
            _ => return Err(md.err("testp takes .f32 or .f64")),
        };
        Ok(Op::Testp {
            kind,
            f,
            d: self.dst(line, self.op(i, 0)?, K::Pred)?,
            a: self.src(line, self.op(i, 1)?, K::F(f))?,
        })
    }
}
