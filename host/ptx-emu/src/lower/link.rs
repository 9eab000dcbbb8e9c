//! The steps that need every function body lowered: the recursion check, call targets patched
//! to entry pcs, and symbol addresses written into initialized module data.

use super::{err, ModuleCtx, Sym};
use crate::ast;
use crate::ir::*;
use crate::LoadError;

/// Links the lowered bodies; returns each function's entry (`u32::MAX` for one without a body).
pub(super) fn link(cx: &mut ModuleCtx, m: &ast::ModuleAst) -> Result<Vec<FuncInfo>, LoadError> {
    let funcs: Vec<FuncInfo> = cx
        .func_entry
        .iter()
        .map(|e| FuncInfo {
            entry_pc: e.unwrap_or(u32::MAX),
        })
        .collect();
    check_recursion(cx, m)?;
    for inst in &mut cx.code {
        if let Op::Call { target, .. } = &mut inst.op {
            let pc = funcs.get(*target as usize).map_or(u32::MAX, |f| f.entry_pc);
            if pc == u32::MAX {
                return Err(err(inst.line, "call to a function without a body"));
            }
            *target = pc;
        }
    }
    // Symbol addresses in initializers (pointer tables).
    for (off, size, name, add, line) in std::mem::take(&mut cx.sym_inits) {
        let v = match cx.globals.get(&name) {
            Some(Sym::Addr(sp, a)) => (sp.generic_base() + *a).wrapping_add(add as u64),
            _ => {
                return Err(err(
                    line,
                    format!("initializer names unknown symbol `{name}`"),
                ))
            }
        };
        let bytes = v.to_le_bytes();
        if let Some(dst) = cx.module_data.get_mut(off..off + size) {
            dst.copy_from_slice(&bytes[..size]);
        }
    }
    Ok(funcs)
}

fn check_recursion(cx: &ModuleCtx, m: &ast::ModuleAst) -> Result<(), LoadError> {
    let n = m.funcs.len();
    let mut adj: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
    for &(from, to, line) in &cx.calls {
        if let Some(v) = adj.get_mut(from as usize) {
            v.push((to, line));
        }
    }
    // Iterative DFS with colours; a back edge is recursion.
    let mut colour = vec![0u8; n];
    for start in 0..n {
        if colour[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        colour[start] = 1;
        while let Some(&mut (u, ref mut k)) = stack.last_mut() {
            if let Some(&(v, line)) = adj[u].get(*k) {
                *k += 1;
                let v = v as usize;
                match colour.get(v) {
                    Some(1) => {
                        return Err(err(
                            line,
                            format!("recursive call to `{}` is not supported", m.funcs[v].name),
                        ))
                    }
                    Some(0) => {
                        colour[v] = 1;
                        stack.push((v, 0));
                    }
                    _ => {}
                }
            } else {
                colour[u] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}
