//! Synchronisation: CTA barriers (`bar.sync`, `bar.red`) and the warp-synchronous ops
//! (`bar.warp.sync`, `shfl`, `vote`, `activemask`, `redux`, `match`).

use super::function::FnLower;
use super::mods::Mods;
use super::types::K;
use crate::ast;
use crate::ir::*;
use crate::LoadError;

impl<'m> FnLower<'_, 'm> {
    pub(super) fn bar(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        if md.has("warp") {
            md.has("sync");
            self.nops(i, 1)?;
            return Ok(Op::BarWarp {
                mask: self.src(line, self.op(i, 0)?, K::Int(32))?,
            });
        }
        md.has("aligned");
        md.has("cta");
        if md.has("red") {
            let (op, popc) = match md.one_of(&["popc", "and", "or"]) {
                Some("popc") => (ReduxOp::Add, true),
                Some("and") => (ReduxOp::And, false),
                Some(_) => (ReduxOp::Or, false),
                None => return Err(md.err("bar.red needs .popc, .and or .or")),
            };
            md.one_of(&["u32", "pred"]);
            let n = i.operands.len();
            if n != 3 && n != 4 {
                return Err(md.err("bar.red takes 3 or 4 operands"));
            }
            let id = self.src(line, self.op(i, 1)?, K::Int(32))?;
            let count = if n == 4 {
                Some(self.src(line, self.op(i, 2)?, K::Int(32))?)
            } else {
                None
            };
            let p = self.psrc(line, self.op(i, n - 1)?)?;
            let d = self.dst(
                line,
                self.op(i, 0)?,
                if popc { K::Int(32) } else { K::Pred },
            )?;
            return Ok(Op::Bar {
                id,
                count,
                red: Some((op, d, p, popc)),
            });
        }
        if !md.has("sync") {
            return Err(md.err("only bar.sync, bar.red and bar.warp.sync are supported"));
        }
        md.has("aligned");
        let n = i.operands.len();
        if n != 1 && n != 2 {
            return Err(md.err("bar.sync takes 1 or 2 operands"));
        }
        let id = self.src(line, self.op(i, 0)?, K::Int(32))?;
        let count = if n == 2 {
            Some(self.src(line, self.op(i, 1)?, K::Int(32))?)
        } else {
            None
        };
        Ok(Op::Bar {
            id,
            count,
            red: None,
        })
    }

    pub(super) fn shfl(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        if !md.has("sync") {
            return Err(md.err("only shfl.sync is supported"));
        }
        let mode = match md.one_of(&["up", "down", "bfly", "idx"]) {
            Some("up") => ShflMode::Up,
            Some("down") => ShflMode::Down,
            Some("bfly") => ShflMode::Bfly,
            Some(_) => ShflMode::Idx,
            None => return Err(md.err("needs .up, .down, .bfly or .idx")),
        };
        if md.one_type()? != "b32" {
            return Err(md.err("shfl takes .b32"));
        }
        self.nops(i, 5)?;
        let (d, p) = self.dst_and_pred(line, self.op(i, 0)?)?;
        Ok(Op::Shfl {
            mode,
            d,
            p,
            a: self.src(line, self.op(i, 1)?, K::Int(32))?,
            b: self.src(line, self.op(i, 2)?, K::Int(32))?,
            c: self.src(line, self.op(i, 3)?, K::Int(32))?,
            mask: self.src(line, self.op(i, 4)?, K::Int(32))?,
        })
    }

    pub(super) fn vote(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        if !md.has("sync") {
            return Err(md.err("only vote.sync is supported"));
        }
        let mode = match md.one_of(&["ballot", "any", "all", "uni"]) {
            Some("ballot") => VoteMode::Ballot,
            Some("any") => VoteMode::Any,
            Some("all") => VoteMode::All,
            Some(_) => VoteMode::Uni,
            None => return Err(md.err("needs .ballot, .any, .all or .uni")),
        };
        let t = md.one_type()?;
        self.nops(i, 3)?;
        let d = if mode == VoteMode::Ballot {
            if t != "b32" {
                return Err(md.err("vote.ballot takes .b32"));
            }
            self.dst(line, self.op(i, 0)?, K::Int(32))?
        } else {
            if t != "pred" {
                return Err(md.err("vote.any/all/uni take .pred"));
            }
            self.dst(line, self.op(i, 0)?, K::Pred)?
        };
        Ok(Op::Vote {
            mode,
            d,
            p: self.psrc(line, self.op(i, 1)?)?,
            mask: self.src(line, self.op(i, 2)?, K::Int(32))?,
        })
    }

    pub(super) fn redux(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        if !md.has("sync") {
            return Err(md.err("only redux.sync is supported"));
        }
        let op = match md.one_of(&["add", "min", "max", "and", "or", "xor"]) {
            Some("add") => ReduxOp::Add,
            Some("min") => ReduxOp::Min,
            Some("max") => ReduxOp::Max,
            Some("and") => ReduxOp::And,
            Some("or") => ReduxOp::Or,
            Some(_) => ReduxOp::Xor,
            None => return Err(md.err("missing operation")),
        };
        let t = md.one_type()?;
        if !matches!(t, "u32" | "s32" | "b32") {
            return Err(md.err("redux.sync takes 32-bit integer types"));
        }
        self.nops(i, 3)?;
        Ok(Op::Redux {
            op,
            signed: t == "s32",
            d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
            a: self.src(line, self.op(i, 1)?, K::Int(32))?,
            mask: self.src(line, self.op(i, 2)?, K::Int(32))?,
        })
    }

    pub(super) fn match_(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        if !md.has("sync") {
            return Err(md.err("only match.sync is supported"));
        }
        let all = match md.one_of(&["any", "all"]) {
            Some("all") => true,
            Some(_) => false,
            None => return Err(md.err("needs .any or .all")),
        };
        let bits = match md.one_type()? {
            "b32" => 32,
            "b64" => 64,
            _ => return Err(md.err("match takes .b32 or .b64")),
        };
        self.nops(i, 3)?;
        let (d, p) = self.dst_and_pred(line, self.op(i, 0)?)?;
        Ok(Op::Match {
            all,
            bits,
            d,
            p,
            a: self.src(line, self.op(i, 1)?, K::Int(bits))?,
            mask: self.src(line, self.op(i, 2)?, K::Int(32))?,
        })
    }

    pub(super) fn activemask(
        &mut self,
        i: &'m ast::Inst,
        md: &mut Mods<'m>,
    ) -> Result<Op, LoadError> {
        md.has("b32");
        self.nops(i, 1)?;
        Ok(Op::Activemask {
            d: self.dst(i.line, self.op(i, 0)?, K::Int(32))?,
        })
    }
}
