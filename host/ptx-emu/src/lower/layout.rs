//! Where everything a module declares lives: module `.global`/`.const` data (with initializers),
//! static and dynamic `.shared`, per-thread `.local`, and the per-thread `.param` area that
//! calls pass arguments through.

use super::types::type_size;
use super::{err, ModuleCtx, Sym};
use crate::ast::{self, InitElem, StateSpace, Stmt, VarDecl};
use crate::ir::*;
use crate::LoadError;

/// Per-thread local memory and per-CTA shared memory are laid out statically for the whole
/// module; these bound them so a declaration cannot make a launch allocate absurd amounts.
const MAX_LOCAL: u64 = 1 << 20;
const MAX_SHARED_STATIC: u64 = 1 << 20;
const MAX_MODULE_DATA: u64 = 1 << 30;
const MAX_TPARAM: u64 = 1 << 20;

pub(crate) fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a.max(1)) * a.max(1)
}

pub(crate) fn decl_size(d: &VarDecl) -> Result<u64, LoadError> {
    let el =
        type_size(&d.ty).ok_or_else(|| err(d.line, format!("unknown type `.{}`", d.ty)))? as u64;
    let mut n = el * d.vec as u64;
    for dim in &d.dims {
        match dim {
            Some(k) => {
                n = n
                    .checked_mul(*k)
                    .ok_or_else(|| err(d.line, "array too large"))?;
            }
            None => n = 0,
        }
    }
    Ok(n)
}

pub(crate) fn decl_align(d: &VarDecl) -> u64 {
    d.align
        .map(|a| a as u64)
        .unwrap_or_else(|| type_size(&d.ty).unwrap_or(1) as u64 * d.vec as u64)
        .max(1)
}

/// Declares a module-scope variable (or a function-scope `.global`/`.const`, under a private
/// name) and places it in its state space.
pub(super) fn module_var(
    cx: &mut ModuleCtx,
    v: &VarDecl,
    shared: &mut SharedCursor,
) -> Result<(), LoadError> {
    if cx.globals.contains_key(&v.name) {
        return Err(err(v.line, format!("`{}` declared twice", v.name)));
    }
    let sym = match v.space {
        StateSpace::Global | StateSpace::Const => {
            let size = decl_size(v)?;
            let at = align_up(cx.module_data.len() as u64, decl_align(v));
            let end = at + size.max(1);
            if end > MAX_MODULE_DATA {
                return Err(err(v.line, "module variables exceed 1 GiB"));
            }
            cx.module_data.resize(end as usize, 0);
            if let Some(init) = &v.init {
                write_init(cx, v, at as usize, size as usize, init)?;
            }
            Sym::Addr(
                if v.space == StateSpace::Global {
                    Space::Global
                } else {
                    Space::Const
                },
                MODULE_WIN + at,
            )
        }
        StateSpace::Shared => {
            if v.init.is_some() {
                return Err(err(v.line, ".shared variables cannot have initializers"));
            }
            Sym::Addr(Space::Shared, shared.place(v)?)
        }
        _ => {
            return Err(err(
                v.line,
                "only .global, .const and .shared variables may be declared at module level",
            ))
        }
    };
    cx.globals.insert(v.name.clone(), sym);
    Ok(())
}

fn write_init(
    cx: &mut ModuleCtx,
    v: &VarDecl,
    at: usize,
    size: usize,
    init: &[InitElem],
) -> Result<(), LoadError> {
    let el = type_size(&v.ty).unwrap_or(1) as usize;
    let is_f32 = v.ty == "f32";
    let is_f64 = v.ty == "f64";
    if init.len() * el > size.max(el) {
        return Err(err(
            v.line,
            format!("too many initializers for `{}`", v.name),
        ));
    }
    for (i, e) in init.iter().enumerate() {
        let off = at + i * el;
        let bits: u64 = match *e {
            InitElem::Int(x) if is_f32 => (x as i64 as f32).to_bits() as u64,
            InitElem::Int(x) if is_f64 => (x as i64 as f64).to_bits(),
            InitElem::Int(x) => x,
            InitElem::F32(b) if is_f64 => (f32::from_bits(b) as f64).to_bits(),
            InitElem::F32(b) => b as u64,
            InitElem::F64(b) if is_f32 => (f64::from_bits(b) as f32).to_bits() as u64,
            InitElem::F64(b) => b,
            InitElem::Float(x) if is_f32 => (x as f32).to_bits() as u64,
            InitElem::Float(x) => x.to_bits(),
            InitElem::Sym(ref name, add) => {
                if el != 8 {
                    return Err(err(
                        v.line,
                        "symbol addresses need 64-bit initializer elements",
                    ));
                }
                cx.sym_inits.push((off, el, name.clone(), add, v.line));
                0
            }
        };
        let bytes = bits.to_le_bytes();
        let n = el.min(8);
        if let Some(dst) = cx.module_data.get_mut(off..off + n) {
            dst.copy_from_slice(&bytes[..n]);
        }
    }
    Ok(())
}

/// Per-CTA shared memory: static arrays are placed one after another, module-wide; every
/// dynamic (`.extern` or unsized) array starts at `dyn_off`, after all the static ones.
pub(super) struct SharedCursor {
    /// End of the static arrays placed so far.
    pub(super) next: u64,
    pub(super) dyn_off: u64,
}

impl SharedCursor {
    /// Sums every static `.shared` declaration of the module first, since no dynamic array's
    /// offset is known before that.
    pub(super) fn new(m: &ast::ModuleAst) -> Result<SharedCursor, LoadError> {
        let mut shared_static = 0u64;
        let mut shared_dyn_align = 16u64;
        let shared_decls = m.vars.iter().chain(m.funcs.iter().flat_map(|f| {
            f.body
                .iter()
                .flatten()
                .filter_map(|s| if let Stmt::Var(d) = s { Some(d) } else { None })
        }));
        for d in shared_decls.filter(|d| d.space == StateSpace::Shared) {
            if is_dynamic_shared(d) {
                shared_dyn_align = shared_dyn_align.max(decl_align(d));
            } else {
                shared_static = align_up(shared_static, decl_align(d)) + decl_size(d)?;
                if shared_static > MAX_SHARED_STATIC {
                    return Err(err(d.line, "static shared memory exceeds 1 MiB"));
                }
            }
        }
        Ok(SharedCursor {
            next: 0,
            dyn_off: align_up(shared_static, shared_dyn_align),
        })
    }

    /// The offset of a `.shared` array: the next free one for a static array, `dyn_off` for a
    /// dynamic one.
    pub(super) fn place(&mut self, d: &VarDecl) -> Result<u64, LoadError> {
        if is_dynamic_shared(d) {
            return Ok(self.dyn_off);
        }
        let at = align_up(self.next, decl_align(d));
        self.next = at + decl_size(d)?;
        Ok(at)
    }
}

/// A `.shared` array whose size is given at launch: `.extern`, or declared without a size.
fn is_dynamic_shared(d: &VarDecl) -> bool {
    d.is_extern || d.dims.iter().any(|x| x.is_none())
}

/// Places a `.local` variable in every thread's local memory; returns its offset.
pub(super) fn alloc_local(cx: &mut ModuleCtx, d: &VarDecl) -> Result<u64, LoadError> {
    let at = align_up(cx.local_next, decl_align(d));
    cx.local_next = at + decl_size(d)?;
    if cx.local_next > MAX_LOCAL {
        return Err(err(d.line, "local memory exceeds 1 MiB per thread"));
    }
    Ok(at)
}

/// Places a `.param` variable (a call's argument or result, or a function's formal) in every
/// thread's parameter area; returns its address (at or above `TPARAM_FLAG`) and size.
pub(super) fn alloc_tparam(cx: &mut ModuleCtx, d: &VarDecl) -> Result<(u64, u64), LoadError> {
    let size = decl_size(d)?;
    let at = align_up(cx.tparam_next, decl_align(d));
    cx.tparam_next = at + size;
    if cx.tparam_next - TPARAM_FLAG > MAX_TPARAM {
        return Err(err(d.line, "too much parameter space"));
    }
    Ok((at, size))
}
