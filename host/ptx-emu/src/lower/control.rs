//! Control flow: branches and calls (including the `vprintf` and `__assertfail` built-ins).

use super::function::FnLower;
use super::mods::Mods;
use super::{err, Sym};
use crate::ast::{self, Operand};
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn call(
        &mut self,
        i: &'m ast::Inst,
        md: &mut Mods<'m>,
        g: Option<(u32, bool)>,
    ) -> Result<(), LoadError> {
        let line = i.line;
        md.has("uni");
        md.finish()?;
        // call (rets), f, (args)   |   call f, (args)   |   call (rets), f   |   call f
        let ops = &i.operands;
        let (rets, rest): (&[Operand], &[Operand]) = match ops.first() {
            Some(Operand::List(r)) => (r.as_slice(), &ops[1..]),
            _ => (&[], ops.as_slice()),
        };
        let (fname, args): (&str, &[Operand]) = match rest {
            [Operand::Name(f)] => (f, &[]),
            [Operand::Name(f), Operand::List(a)] => (f, a.as_slice()),
            [Operand::Name(_), Operand::List(_), _] => {
                return Err(err(
                    line,
                    "indirect calls through prototypes are not supported",
                ))
            }
            _ => return Err(err(line, "malformed call")),
        };
        let fid = match self.name_sym(line, fname)? {
            Sym::Func(f) => f,
            Sym::Reg(..) => return Err(err(line, "indirect calls are not supported")),
            _ => return Err(err(line, format!("`{fname}` is not a function"))),
        };
        let param_off = |s: &Self, o: &Operand| -> Result<u32, LoadError> {
            match o {
                Operand::Name(n) => match s.name_sym(line, n)? {
                    Sym::Addr(Space::Param, a) if a >= TPARAM_FLAG => Ok(a as u32),
                    _ => Err(err(
                        line,
                        format!("call argument `{n}` must be a .param variable"),
                    )),
                },
                _ => Err(err(line, "call arguments must be .param variable names")),
            }
        };
        let callee = self
            .m
            .funcs
            .get(fid as usize)
            .ok_or_else(|| err(line, "bad function"))?;
        if callee.body.is_none() {
            match fname {
                "vprintf" => {
                    if args.len() != 2 || rets.len() > 1 {
                        return Err(err(
                            line,
                            "vprintf takes (format, args) and returns one value",
                        ));
                    }
                    let op = Op::Vprintf {
                        ret: rets.first().map(|r| param_off(self, r)).transpose()?,
                        fmt: param_off(self, &args[0])?,
                        args: param_off(self, &args[1])?,
                    };
                    self.push(line, g, op);
                    self.push(line, None, Op::Nop);
                    return Ok(());
                }
                "__assertfail" => {
                    let first = args
                        .first()
                        .ok_or_else(|| err(line, "__assertfail needs arguments"))?;
                    let op = Op::AssertFail {
                        args: param_off(self, first)?,
                    };
                    self.push(line, g, op);
                    self.push(line, None, Op::Nop);
                    return Ok(());
                }
                _ => {
                    return Err(err(
                        line,
                        format!(
                            "call to `{fname}`, which has no body and is not a supported built-in"
                        ),
                    ))
                }
            }
        }
        if callee.is_entry {
            return Err(err(line, "cannot call a kernel"));
        }
        let (fp, fr) = self
            .cx
            .func_params
            .get(fid as usize)
            .cloned()
            .unwrap_or_default();
        if args.len() != fp.len() || rets.len() != fr.len() {
            return Err(err(
                line,
                format!("call to `{fname}` with the wrong number of arguments or results"),
            ));
        }
        let mut ac = Vec::new();
        for (a, (to, len)) in args.iter().zip(fp) {
            ac.push(Copy3 {
                from: param_off(self, a)?,
                to,
                len,
            });
        }
        let mut rc = Vec::new();
        for (r, (from, len)) in rets.iter().zip(fr) {
            rc.push(Copy3 {
                from,
                to: param_off(self, r)?,
                len,
            });
        }
        self.cx.calls.push((self.fi, fid, line));
        // The target is the callee's entry; it may not be lowered yet, so it is patched later.
        self.push(
            line,
            g,
            Op::Call {
                target: fid,
                args: ac.into(),
            },
        );
        self.push(line, None, Op::CallRet { rets: rc.into() });
        Ok(())
    }

    pub(super) fn bra(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        md.has("uni");
        self.nops(i, 1)?;
        let Operand::Name(l) = self.op(i, 0)? else {
            return Err(err(line, "bra needs a label"));
        };
        // The target is patched once the whole body's labels are known.
        self.fixups.push((self.cx.code.len(), l.clone(), line));
        Ok(Op::Bra { target: 0 })
    }
}
