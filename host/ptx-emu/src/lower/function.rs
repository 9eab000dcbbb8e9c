//! One function body: its scopes, registers, local declarations and labels, and the routing of
//! each instruction to the lowering of its family.

use std::collections::HashMap;

use super::layout::{alloc_local, alloc_tparam, module_var, SharedCursor};
use super::mem;
use super::mods::Mods;
use super::types::{type_size, K};
use super::{err, ModuleCtx, Sym};
use crate::ast::{self, StateSpace, Stmt, VarDecl};
use crate::ir::*;
use crate::{KernelInfo, LoadError};

/// The state of lowering one function body; the instruction families add their methods in
/// their own files.
pub(super) struct FnLower<'c, 'm> {
    pub(super) cx: &'c mut ModuleCtx,
    pub(super) m: &'m ast::ModuleAst,
    /// This function's index in the module.
    pub(super) fi: u32,
    pub(super) scopes: Vec<HashMap<String, Sym>>,
    pub(super) labels: HashMap<String, u32>,
    /// (code index, label, line) to patch once all labels are known.
    pub(super) fixups: Vec<(usize, String, u32)>,
    /// Where writes to `_` go.
    pub(super) sink_reg: u32,
    pub(super) sink_pred: u32,
}

impl<'c, 'm> FnLower<'c, 'm> {
    /// Lowers function `fi`'s body onto the end of `cx.code`, ending it with a `ret`; `kinfo` is
    /// the signature of a kernel, whose parameters live in the argument block rather than in
    /// the per-thread parameter area.
    pub(super) fn run(
        cx: &'c mut ModuleCtx,
        m: &'m ast::ModuleAst,
        fi: usize,
        f: &ast::Function,
        body: &[Stmt],
        shared: &mut SharedCursor,
        kinfo: Option<&KernelInfo>,
    ) -> Result<(), LoadError> {
        let sink_reg = cx.num_regs;
        cx.num_regs += 1;
        let sink_pred = cx.num_preds;
        cx.num_preds += 1;
        let mut fl = FnLower {
            cx,
            m,
            fi: fi as u32,
            scopes: vec![HashMap::new()],
            labels: HashMap::new(),
            fixups: Vec::new(),
            sink_reg,
            sink_pred,
        };
        if let Some(k) = kinfo {
            let (offs, _) = k.param_layout();
            for (p, off) in f.params.iter().zip(offs) {
                fl.declare(p.line, &p.name, Sym::Addr(Space::Param, off as u64))?;
            }
        } else {
            let (ps, rs) = fl.cx.func_params.get(fi).cloned().unwrap_or_default();
            for (p, (off, _)) in f.params.iter().zip(ps) {
                fl.declare(p.line, &p.name, Sym::Addr(Space::Param, off as u64))?;
            }
            for (p, (off, _)) in f.rets.iter().zip(rs) {
                fl.declare(p.line, &p.name, Sym::Addr(Space::Param, off as u64))?;
            }
        }
        // Labels are function-wide and may be used before they appear.
        let mut pc = fl.cx.code.len() as u32;
        for s in body {
            match s {
                Stmt::Label(line, name) if fl.labels.insert(name.clone(), pc).is_some() => {
                    return Err(err(*line, format!("label `{name}` defined twice")));
                }
                Stmt::Inst(i) => pc += inst_len(i),
                _ => {}
            }
        }
        for s in body {
            match s {
                Stmt::Open => fl.scopes.push(HashMap::new()),
                Stmt::Close(line) => {
                    if fl.scopes.len() <= 1 {
                        return Err(err(*line, "unbalanced `}`"));
                    }
                    fl.scopes.pop();
                }
                Stmt::Label(..) => {}
                Stmt::Var(d) => fl.var(d, shared)?,
                Stmt::Inst(i) => {
                    let before = fl.cx.code.len();
                    fl.inst(i)?;
                    debug_assert_eq!(fl.cx.code.len() - before, inst_len(i) as usize);
                }
            }
        }
        // Falling off the end of a body returns (nvcc always ends with ret, hand-written PTX may
        // not).
        let line = body
            .iter()
            .rev()
            .find_map(|s| {
                if let Stmt::Inst(i) = s {
                    Some(i.line)
                } else {
                    None
                }
            })
            .unwrap_or(f.line);
        fl.cx.code.push(Inst {
            op: Op::Ret,
            guard: None,
            line,
        });
        for (at, label, line) in std::mem::take(&mut fl.fixups) {
            let t = *fl
                .labels
                .get(&label)
                .ok_or_else(|| err(line, format!("unknown label `{label}`")))?;
            if let Some(Inst {
                op: Op::Bra { target },
                ..
            }) = fl.cx.code.get_mut(at)
            {
                *target = t;
            }
        }
        Ok(())
    }

    fn declare(&mut self, line: u32, name: &str, s: Sym) -> Result<(), LoadError> {
        let scope = self
            .scopes
            .last_mut()
            .ok_or_else(|| err(line, "no scope"))?;
        if scope.insert(name.to_string(), s).is_some() {
            return Err(err(line, format!("`{name}` declared twice in one scope")));
        }
        Ok(())
    }

    pub(super) fn lookup(&self, name: &str) -> Option<Sym> {
        for s in self.scopes.iter().rev() {
            if let Some(x) = s.get(name) {
                return Some(*x);
            }
        }
        if let Some(x) = self.cx.globals.get(name) {
            return Some(*x);
        }
        self.cx.func_ids.get(name).map(|&f| Sym::Func(f))
    }

    fn var(&mut self, d: &VarDecl, shared: &mut SharedCursor) -> Result<(), LoadError> {
        match d.space {
            StateSpace::Reg => {
                let is_pred = d.ty == "pred";
                let bits = match type_size(&d.ty) {
                    Some(s) if !is_pred => (s * 8 * d.vec) as u8,
                    Some(_) => 1,
                    None => return Err(err(d.line, format!("unknown register type `.{}`", d.ty))),
                };
                if d.vec != 1 || bits > 64 {
                    return Err(err(
                        d.line,
                        "vector and 128-bit registers are not supported",
                    ));
                }
                let count = d.range.unwrap_or(1);
                for k in 0..count {
                    let name = if d.range.is_some() {
                        format!("{}{}", d.name, k)
                    } else {
                        d.name.clone()
                    };
                    let sym = if is_pred {
                        let i = self.cx.num_preds;
                        self.cx.num_preds += 1;
                        Sym::Pred(i)
                    } else {
                        let i = self.cx.num_regs;
                        self.cx.num_regs += 1;
                        Sym::Reg(i, bits)
                    };
                    if self.cx.num_regs > 1 << 20 || self.cx.num_preds > 1 << 20 {
                        return Err(err(d.line, "too many registers"));
                    }
                    // Redeclaring a register in the same scope is harmless in practice; the
                    // latest wins (matching ptxas, which merges them).
                    if let Some(s) = self.scopes.last_mut() {
                        s.insert(name, sym);
                    }
                }
                Ok(())
            }
            StateSpace::Local => {
                if d.init.is_some() {
                    return Err(err(d.line, ".local variables cannot have initializers"));
                }
                let at = alloc_local(self.cx, d)?;
                self.declare(d.line, &d.name, Sym::Addr(Space::Local, at))
            }
            StateSpace::Shared => {
                let off = shared.place(d)?;
                self.declare(d.line, &d.name, Sym::Addr(Space::Shared, off))
            }
            StateSpace::Param => {
                let (at, _) = alloc_tparam(self.cx, d)?;
                self.declare(d.line, &d.name, Sym::Addr(Space::Param, at))
            }
            StateSpace::Global | StateSpace::Const => {
                // Function-scope globals behave like module-level ones with a private name.
                let name = d.name.clone();
                let mut g = d.clone();
                g.name = format!("{}::{}", self.fi, name);
                module_var(self.cx, &g, shared)?;
                let s = *self
                    .cx
                    .globals
                    .get(&g.name)
                    .ok_or_else(|| err(d.line, "internal: variable lost"))?;
                self.declare(d.line, &name, s)
            }
        }
    }

    pub(super) fn push(&mut self, line: u32, guard: Option<(u32, bool)>, op: Op) {
        self.cx.code.push(Inst { op, guard, line });
    }

    /// Lowers one instruction: routes it by opcode to the lowering of its family, then checks
    /// that every modifier was understood.
    fn inst(&mut self, i: &'m ast::Inst) -> Result<(), LoadError> {
        let line = i.line;
        let g = self.guard(i)?;
        let mut md = Mods::new(&i.opcode, line);
        let op = match md.base {
            "mov" => self.mov(i, &mut md)?,
            "ld" | "ldu" => self.ld(i, &mut md)?,
            "st" => self.st(i, &mut md)?,
            "cvta" => self.cvta(i, &mut md)?,
            "add" | "sub" | "addc" | "subc"
                if md.list.contains(&"cc") || md.base.ends_with('c') =>
            {
                self.carry(i, &mut md)?
            }
            "madc" => self.carry(i, &mut md)?,
            "mad" if md.list.contains(&"cc") => self.carry(i, &mut md)?,
            "sad" => self.sad(i, &mut md)?,
            "add" | "sub" | "mul" | "div" | "rem" | "and" | "or" | "xor" | "shl" | "shr"
            | "min" | "max" | "mul24" | "copysign" => self.binary(i, &mut md)?,
            "mad" | "fma" | "mad24" => self.ternary(i, &mut md)?,
            "not" | "cnot" | "neg" | "abs" | "popc" | "clz" | "brev" | "bfind" | "sqrt" | "rcp"
            | "rsqrt" | "sin" | "cos" | "ex2" | "lg2" | "tanh" => self.unary(i, &mut md)?,
            "bfe" | "prmt" | "shf" | "szext" | "dp4a" | "dp2a" => self.bits3(i, &mut md)?,
            "bfi" => self.bfi(i, &mut md)?,
            "cvt" => self.cvt(i, &mut md)?,
            "setp" | "set" => self.setp(i, &mut md)?,
            "selp" => self.selp(i, &mut md)?,
            "slct" => self.slct(i, &mut md)?,
            "testp" => self.testp(i, &mut md)?,
            "bra" => self.bra(i, &mut md)?,
            "ret" => {
                md.has("uni");
                Op::Ret
            }
            "exit" => Op::Exit,
            "trap" => Op::Trap,
            "brkpt" => Op::Nop,
            "call" => return self.call(i, &mut md, g),
            "bar" | "barrier" => self.bar(i, &mut md)?,
            "membar" | "fence" => mem::fence(&mut md),
            "nanosleep" => {
                md.has("u32");
                self.nops(i, 1)?;
                Op::Nanosleep {
                    t: self.src(line, self.op(i, 0)?, K::Int(32))?,
                }
            }
            // Hints with no effect on results.
            "prefetch" | "prefetchu" | "pmevent" => {
                md.list
                    .iter()
                    .enumerate()
                    .for_each(|(k, _)| md.used[k] = true);
                Op::Nop
            }
            "shfl" => self.shfl(i, &mut md)?,
            "vote" => self.vote(i, &mut md)?,
            "activemask" => self.activemask(i, &mut md)?,
            "redux" => self.redux(i, &mut md)?,
            "match" => self.match_(i, &mut md)?,
            "atom" | "red" => self.atom(i, &mut md)?,
            _ => return Err(err(line, format!("unsupported instruction `{}`", i.opcode))),
        };
        md.finish()?;
        self.push(line, g, op);
        Ok(())
    }
}

/// How many IR instructions an AST instruction becomes (calls take two: the call and its
/// return-value copy), so labels can be resolved before lowering.
fn inst_len(i: &ast::Inst) -> u32 {
    if i.opcode == "call" || i.opcode.starts_with("call.") {
        2
    } else {
        1
    }
}
