//! Operands: names resolved to registers, predicates and addresses, literals converted to the
//! bits of the type the instruction reads, and operand-count checks.

use super::function::FnLower;
use super::types::K;
use super::{err, Sym};
use crate::ast::{self, Operand};
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn name_sym(&self, line: u32, name: &str) -> Result<Sym, LoadError> {
        self.lookup(name).ok_or_else(|| match envreg_index(name) {
            Some(_) => err(
                line,
                format!(
                    "`{name}` is a read-only driver-defined register: only `mov.b32 %r, {name}` \
                     reads it (into a register the instruction then uses)"
                ),
            ),
            None => err(line, format!("unknown name `{name}`")),
        })
    }

    pub(super) fn dst(&mut self, line: u32, o: &Operand, k: K) -> Result<u32, LoadError> {
        match (o, k) {
            (Operand::Sink, K::Pred) => Ok(self.sink_pred),
            (Operand::Sink, _) => Ok(self.sink_reg),
            (Operand::Name(n), K::Pred) => match self.name_sym(line, n)? {
                Sym::Pred(i) => Ok(i),
                _ => Err(err(line, format!("`{n}` is not a predicate register"))),
            },
            (Operand::Name(n), _) => match self.name_sym(line, n)? {
                Sym::Reg(i, _) if (i as usize) > SPECIAL_REGS.len() => Ok(i),
                Sym::Reg(..) => Err(err(line, format!("cannot write special register `{n}`"))),
                _ => Err(err(line, format!("`{n}` is not a data register"))),
            },
            _ => Err(err(
                line,
                format!("expected a register destination, found {}", show_op(o)),
            )),
        }
    }

    pub(super) fn psrc(&mut self, line: u32, o: &Operand) -> Result<PSrc, LoadError> {
        match o {
            Operand::Not(inner) => match self.psrc(line, inner)? {
                PSrc::R(r, n) => Ok(PSrc::R(r, !n)),
                PSrc::I(b) => Ok(PSrc::I(!b)),
            },
            Operand::Int(v) => Ok(PSrc::I(*v != 0)),
            Operand::Name(n) => match self.name_sym(line, n)? {
                Sym::Pred(i) => Ok(PSrc::R(i, false)),
                _ => Err(err(line, format!("`{n}` is not a predicate"))),
            },
            _ => Err(err(
                line,
                format!("expected a predicate, found {}", show_op(o)),
            )),
        }
    }

    pub(super) fn src(&mut self, line: u32, o: &Operand, k: K) -> Result<Src, LoadError> {
        let imm = |v: u64| Ok(Src::I(v));
        match o {
            Operand::Name(n) => match self.name_sym(line, n)? {
                Sym::Reg(i, _) => Ok(Src::R(i)),
                Sym::Addr(_, a) => imm(a),
                Sym::Pred(_) => Err(err(line, format!("predicate `{n}` used as a value"))),
                Sym::Func(_) => Err(err(
                    line,
                    format!("function `{n}` used as a value (indirect calls are not supported)"),
                )),
            },
            Operand::SymOff(n, off) => match self.name_sym(line, n)? {
                Sym::Addr(_, a) => imm(a.wrapping_add(*off as u64)),
                _ => Err(err(line, format!("`{n}+{off}` is not an address"))),
            },
            Operand::Int(v) => match k {
                K::F(FT::F32) => imm((*v as i64 as f32).to_bits() as u64),
                K::F(FT::F64) => imm((*v as i64 as f64).to_bits()),
                _ => imm(*v),
            },
            Operand::F32(b) => match k {
                K::F(FT::F64) => imm((f32::from_bits(*b) as f64).to_bits()),
                K::F(FT::F16) => imm(crate::float::f32_to_f16(f32::from_bits(*b), Rnd::N) as u64),
                K::F(FT::BF16) => imm(crate::float::f32_to_bf16(f32::from_bits(*b), Rnd::N) as u64),
                _ => imm(*b as u64),
            },
            Operand::F64(b) => match k {
                K::F(FT::F32) => imm((f64::from_bits(*b) as f32).to_bits() as u64),
                K::F(FT::F16) => imm(crate::float::f64_to_f16(f64::from_bits(*b), Rnd::N) as u64),
                _ => imm(*b),
            },
            Operand::Float(x) => match k {
                K::F(FT::F32) => imm((*x as f32).to_bits() as u64),
                K::F(FT::F64) => imm(x.to_bits()),
                K::F(FT::F16) => imm(crate::float::f64_to_f16(*x, Rnd::N) as u64),
                _ => Err(err(
                    line,
                    "floating-point literal where an integer is expected",
                )),
            },
            _ => Err(err(line, format!("unexpected operand {}", show_op(o)))),
        }
    }

    pub(super) fn addr(
        &mut self,
        line: u32,
        o: &Operand,
    ) -> Result<(Addr, Option<Space>), LoadError> {
        match o {
            Operand::Addr(None, off) => Ok((
                Addr {
                    base: None,
                    off: *off,
                    base32: false,
                },
                None,
            )),
            Operand::Addr(Some(n), off) => match self.name_sym(line, n)? {
                Sym::Reg(i, bits) => Ok((
                    Addr {
                        base: Some(i),
                        off: *off,
                        base32: bits <= 32,
                    },
                    None,
                )),
                Sym::Addr(sp, a) => Ok((
                    Addr {
                        base: None,
                        off: (a as i64).wrapping_add(*off),
                        base32: false,
                    },
                    Some(sp),
                )),
                _ => Err(err(line, format!("`{n}` cannot be used as an address"))),
            },
            // `ld.param.u32 %r1, foo_param_1` is occasionally written without brackets.
            _ => Err(err(
                line,
                format!("expected an address `[...]`, found {}", show_op(o)),
            )),
        }
    }

    pub(super) fn nops(&self, i: &ast::Inst, n: usize) -> Result<(), LoadError> {
        if i.operands.len() != n {
            return Err(err(
                i.line,
                format!(
                    "`{}` takes {n} operands, found {}",
                    i.opcode,
                    i.operands.len()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn op(&self, i: &'m ast::Inst, k: usize) -> Result<&'m Operand, LoadError>
    where
        'm: 'm,
    {
        i.operands
            .get(k)
            .ok_or_else(|| err(i.line, format!("`{}`: missing operand {}", i.opcode, k + 1)))
    }

    pub(super) fn guard(&mut self, i: &ast::Inst) -> Result<Option<(u32, bool)>, LoadError> {
        match &i.guard {
            None => Ok(None),
            Some((name, neg)) => match self.name_sym(i.line, name)? {
                Sym::Pred(p) => Ok(Some((p, *neg))),
                _ => Err(err(
                    i.line,
                    format!("guard `{name}` is not a predicate register"),
                )),
            },
        }
    }

    /// A 32-bit destination, optionally paired with a predicate one (`%r1|%p1`).
    pub(super) fn dst_and_pred(
        &mut self,
        line: u32,
        o: &Operand,
    ) -> Result<(u32, Option<u32>), LoadError> {
        match o {
            Operand::Pair(x, y) => Ok((self.dst(line, x, K::Int(32))?, self.pdst_opt(line, y)?)),
            o => Ok((self.dst(line, o, K::Int(32))?, None)),
        }
    }

    pub(super) fn pdst_opt(&mut self, line: u32, o: &Operand) -> Result<Option<u32>, LoadError> {
        match o {
            Operand::Sink => Ok(None),
            o => Ok(Some(self.dst(line, o, K::Pred)?)),
        }
    }
}

fn show_op(o: &Operand) -> String {
    match o {
        Operand::Name(n) => format!("`{n}`"),
        Operand::Int(v) => format!("`{v}`"),
        Operand::Addr(..) => "an address".into(),
        Operand::Vec(_) => "a vector".into(),
        Operand::List(_) => "a list".into(),
        Operand::Sink => "`_`".into(),
        _ => "an operand".into(),
    }
}
