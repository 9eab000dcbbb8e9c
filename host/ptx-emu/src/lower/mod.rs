//! Lowering, AST → [`Program`]: resolves names to register indices and addresses, lays out every
//! state space, and validates each instruction and modifier. Everything the executor may later
//! trust (register indices, branch targets, operand kinds) is established here.
//!
//! A module is lowered in passes: memory layout of the module's variables (`layout`), function
//! ids and formal parameters, each function body (`function`, which routes every instruction to
//! the file of its family), then the links that need all bodies (`link`). `signatures` serves the
//! kernel signatures alone, without lowering any body.
//!
//! The instruction families, one file each: `arith` (integer, float and predicate arithmetic),
//! `data` (moves, conversions), `compare` (comparisons, selection), `mem` (loads, stores,
//! atomics), `control` (branches, calls), `sync` (barriers, warp-synchronous ops). They share
//! `operands` (operand resolution), `mods` (opcode modifiers) and `types` (PTX type words).

mod address_use;
mod arith;
mod compare;
mod control;
mod data;
mod function;
pub(crate) mod layout;
mod link;
mod mem;
mod mods;
mod operands;
mod signatures;
mod sync;
mod types;

use std::collections::HashMap;

use crate::ast::{self, StateSpace};
use crate::ir::*;
use crate::load_error as err;
use crate::{KernelInfo, LoadError};
use function::FnLower;
use layout::SharedCursor;

pub(crate) use signatures::{entry_param_types, entry_signatures};

/// What a name stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sym {
    /// A data register: index and declared width in bits.
    Reg(u32, u8),
    Pred(u32),
    /// A symbol whose value is an address in its state space.
    Addr(Space, u64),
    Func(u32),
}

/// A function's `.param` formals and returns: (tparam address, size) each.
type FormalLayout = (Vec<(u32, u32)>, Vec<(u32, u32)>);

/// Module-wide state while lowering: names, register counts, memory layout and the code so far.
struct ModuleCtx {
    globals: HashMap<String, Sym>,
    func_ids: HashMap<String, u32>,
    module_data: Vec<u8>,
    local_next: u64,
    tparam_next: u64,
    num_regs: u32,
    num_preds: u32,
    /// Functions' formal parameters: (offset, size) per param and per return, in tparam space.
    func_params: Vec<FormalLayout>,
    func_entry: Vec<Option<u32>>,
    code: Vec<Inst>,
    /// (calling function, callee, line) for the recursion check.
    calls: Vec<(u32, u32, u32)>,
    /// Init fix-ups of symbol addresses inside module data: (offset, size, symbol, add).
    sym_inits: Vec<(usize, usize, String, i64, u32)>,
}

pub(crate) fn lower(m: &ast::ModuleAst) -> Result<(Program, Vec<KernelInfo>), LoadError> {
    let mut cx = ModuleCtx {
        globals: HashMap::new(),
        func_ids: HashMap::new(),
        module_data: Vec::new(),
        local_next: 0,
        tparam_next: TPARAM_FLAG,
        num_regs: SPECIAL_REGS.len() as u32 + 1,
        num_preds: 1,
        func_params: Vec::new(),
        func_entry: Vec::new(),
        code: Vec::new(),
        calls: Vec::new(),
        sym_inits: Vec::new(),
    };
    for (i, s) in SPECIAL_REGS.iter().enumerate() {
        cx.globals.insert(s.to_string(), Sym::Reg(i as u32, 32));
    }

    let mut shared = SharedCursor::new(m)?;
    for v in &m.vars {
        layout::module_var(&mut cx, v, &mut shared)?;
    }
    declare_functions(&mut cx, m)?;

    let mut kernels = Vec::new();
    let mut kernel_funcs = Vec::new();
    for (fi, f) in m.funcs.iter().enumerate() {
        let Some(body) = &f.body else { continue };
        let entry = cx.code.len() as u32;
        cx.func_entry[fi] = Some(entry);
        if f.is_entry {
            let info = signatures::kernel_info(f)?;
            kernel_funcs.push(fi);
            kernels.push(info);
        }
        FnLower::run(
            &mut cx,
            m,
            fi,
            f,
            body,
            &mut shared,
            kernels.last().filter(|_| f.is_entry),
        )?;
    }
    let funcs = link::link(&mut cx, m)?;
    let prog = Program {
        code: cx.code,
        funcs,
        kernel_funcs,
        num_regs: cx.num_regs,
        num_preds: cx.num_preds,
        shared_static: shared.next as u32,
        shared_dyn_off: shared.dyn_off as u32,
        local_size: layout::align_up(cx.local_next, 16) as u32,
        tparam_size: layout::align_up(cx.tparam_next - TPARAM_FLAG, 16) as u32,
        module_data: cx.module_data,
    };
    Ok((prog, kernels))
}

/// Gives every function its id (so calls can refer forward) and lays out the formal parameters
/// of the non-kernel ones.
fn declare_functions(cx: &mut ModuleCtx, m: &ast::ModuleAst) -> Result<(), LoadError> {
    for (i, f) in m.funcs.iter().enumerate() {
        if let Some(&prev) = cx.func_ids.get(&f.name) {
            let p = &m.funcs[prev as usize];
            if p.body.is_some() && f.body.is_some() {
                return Err(err(f.line, format!("function `{}` defined twice", f.name)));
            }
            if f.body.is_none() {
                cx.func_ids.entry(f.name.clone()).or_insert(i as u32);
                cx.func_params.push((Vec::new(), Vec::new()));
                cx.func_entry.push(None);
                continue;
            }
        }
        cx.func_ids.insert(f.name.clone(), i as u32);
        if cx.globals.contains_key(&f.name) {
            return Err(err(
                f.line,
                format!("`{}` is both a variable and a function", f.name),
            ));
        }
        let mut ps = Vec::new();
        let mut rs = Vec::new();
        if !f.is_entry {
            for (list, out) in [(&f.params, &mut ps), (&f.rets, &mut rs)] {
                for p in list.iter() {
                    if p.space != StateSpace::Param {
                        return Err(err(
                            p.line,
                            format!("function parameter `{}` must be in .param space", p.name),
                        ));
                    }
                    let (at, size) = layout::alloc_tparam(cx, p)?;
                    out.push((at as u32, size as u32));
                }
            }
        }
        cx.func_params.push((ps, rs));
        cx.func_entry.push(None);
    }
    // Names map to the defining entry when a declaration precedes a definition.
    for (i, f) in m.funcs.iter().enumerate() {
        if f.body.is_some() {
            cx.func_ids.insert(f.name.clone(), i as u32);
        }
    }
    Ok(())
}
