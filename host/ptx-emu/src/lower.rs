//! AST → [`Program`]: resolves names to register indices and addresses, lays out every state
//! space, and validates each instruction and modifier. Everything the executor may later trust
//! (register indices, branch targets, operand kinds) is established here.

use std::collections::HashMap;

use crate::ast::{self, InitElem, Operand, StateSpace, Stmt, VarDecl};
use crate::ir::*;
use crate::{KernelInfo, LoadError, ParamInfo};

fn err(line: u32, message: impl Into<String>) -> LoadError {
    LoadError {
        line,
        message: message.into(),
    }
}

/// Per-thread local memory and per-CTA shared memory are laid out statically for the whole
/// module; these bound them so a declaration cannot make a launch allocate absurd amounts.
const MAX_LOCAL: u64 = 1 << 20;
const MAX_SHARED_STATIC: u64 = 1 << 20;
const MAX_MODULE_DATA: u64 = 1 << 30;
const MAX_TPARAM: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sym {
    /// A data register: index and declared width in bits.
    Reg(u32, u8),
    Pred(u32),
    /// A symbol whose value is an address in its state space.
    Addr(Space, u64),
    Func(u32),
}

/// The kind of value an operand position holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    Int(u8),
    F(FT),
    Pred,
}

pub(crate) fn type_size(ty: &str) -> Option<u32> {
    Some(match ty {
        "b8" | "u8" | "s8" | "pred" => 1,
        "b16" | "u16" | "s16" | "f16" | "bf16" => 2,
        "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => 4,
        "b64" | "u64" | "s64" | "f64" => 8,
        "b128" => 16,
        _ => return None,
    })
}

fn parse_ty(s: &str) -> Option<Ty> {
    Some(match s {
        "b8" | "u8" => Ty::I(IT {
            bits: 8,
            signed: false,
        }),
        "s8" => Ty::I(IT {
            bits: 8,
            signed: true,
        }),
        "b16" | "u16" => Ty::I(IT {
            bits: 16,
            signed: false,
        }),
        "s16" => Ty::I(IT {
            bits: 16,
            signed: true,
        }),
        "b32" | "u32" => Ty::I(IT {
            bits: 32,
            signed: false,
        }),
        "s32" => Ty::I(IT {
            bits: 32,
            signed: true,
        }),
        "b64" | "u64" => Ty::I(IT {
            bits: 64,
            signed: false,
        }),
        "s64" => Ty::I(IT {
            bits: 64,
            signed: true,
        }),
        "f16" => Ty::F(FT::F16),
        "bf16" => Ty::F(FT::BF16),
        "f32" => Ty::F(FT::F32),
        "f64" => Ty::F(FT::F64),
        _ => return None,
    })
}

fn ft_bits(f: FT) -> u8 {
    match f {
        FT::F16 | FT::BF16 => 16,
        FT::F32 => 32,
        FT::F64 => 64,
    }
}

fn kind_of(t: Ty) -> K {
    match t {
        Ty::I(i) => K::Int(i.bits),
        Ty::F(f) => K::F(f),
    }
}

/// The modifiers of one opcode; each lowering consumes the ones it understands, and any left
/// over makes the instruction unsupported.
struct Mods<'a> {
    base: &'a str,
    full: &'a str,
    list: Vec<&'a str>,
    used: Vec<bool>,
    line: u32,
}

impl<'a> Mods<'a> {
    fn new(full: &'a str, line: u32) -> Self {
        let mut it = full.split('.');
        let base = it.next().unwrap_or("");
        let list: Vec<&str> = it.collect();
        let used = vec![false; list.len()];
        Mods {
            base,
            full,
            list,
            used,
            line,
        }
    }
    fn has(&mut self, m: &str) -> bool {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && *x == m {
                self.used[i] = true;
                return true;
            }
        }
        false
    }
    fn one_of(&mut self, opts: &[&'a str]) -> Option<&'a str> {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && opts.contains(x) {
                self.used[i] = true;
                return Some(x);
            }
        }
        None
    }
    /// Consumes and returns every remaining type modifier, in order.
    fn types(&mut self) -> Vec<&'a str> {
        let mut out = Vec::new();
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] && (type_size(x).is_some()) {
                self.used[i] = true;
                out.push(*x);
            }
        }
        out
    }
    fn one_type(&mut self) -> Result<&'a str, LoadError> {
        let t = self.types();
        match t.as_slice() {
            [x] => Ok(x),
            [] => Err(self.err("missing a type modifier")),
            _ => Err(self.err("too many type modifiers")),
        }
    }
    fn rnd(&mut self) -> Option<Rnd> {
        self.one_of(&["rn", "rz", "rm", "rp", "rna"])
            .map(|r| match r {
                "rn" => Rnd::N,
                "rz" => Rnd::Z,
                "rm" => Rnd::M,
                "rp" => Rnd::P,
                _ => Rnd::A,
            })
    }
    fn int_rnd(&mut self) -> Option<Rnd> {
        self.one_of(&["rni", "rzi", "rmi", "rpi"]).map(|r| match r {
            "rni" => Rnd::N,
            "rzi" => Rnd::Z,
            "rmi" => Rnd::M,
            _ => Rnd::P,
        })
    }
    /// Memory-ordering, scope and cache qualifiers that do not change single-copy semantics in
    /// the emulator (it runs every access as a relaxed atomic of the access width).
    fn ignore_mem_hints(&mut self) {
        for (i, x) in self.list.iter().enumerate() {
            if self.used[i] {
                continue;
            }
            let ignorable = matches!(
                *x,
                "volatile"
                    | "relaxed"
                    | "acquire"
                    | "release"
                    | "acq_rel"
                    | "weak"
                    | "sc"
                    | "mmio"
                    | "cta"
                    | "gpu"
                    | "sys"
                    | "cluster"
                    | "nc"
                    | "ca"
                    | "cg"
                    | "cs"
                    | "lu"
                    | "cv"
                    | "wb"
                    | "wt"
                    | "unified"
            ) || x.starts_with("L1::")
                || x.starts_with("L2::");
            if ignorable {
                self.used[i] = true;
            }
        }
    }
    fn err(&self, msg: &str) -> LoadError {
        err(self.line, format!("`{}`: {msg}", self.full))
    }
    fn finish(&self) -> Result<(), LoadError> {
        for (i, x) in self.list.iter().enumerate() {
            if !self.used[i] {
                return Err(err(
                    self.line,
                    format!(
                        "unsupported modifier `.{x}` in `{}` (instruction `{}`)",
                        self.full, self.base
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A function's `.param` formals and returns: (tparam address, size) each.
type FormalLayout = (Vec<(u32, u32)>, Vec<(u32, u32)>);

struct ModuleCtx {
    globals: HashMap<String, Sym>,
    func_ids: HashMap<String, u32>,
    module_data: Vec<u8>,
    shared_next: u64,
    shared_dyn_align: u64,
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

fn align_up(v: u64, a: u64) -> u64 {
    v.div_ceil(a.max(1)) * a.max(1)
}

fn decl_size(d: &VarDecl) -> Result<u64, LoadError> {
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

fn decl_align(d: &VarDecl) -> u64 {
    d.align
        .map(|a| a as u64)
        .unwrap_or_else(|| type_size(&d.ty).unwrap_or(1) as u64 * d.vec as u64)
        .max(1)
}

/// The launch signature of an `.entry`: its parameters as the argument block lays them out.
/// Shared by [`lower`] and [`entry_signatures`] so both report the same layout.
fn kernel_info(f: &ast::Function) -> Result<KernelInfo, LoadError> {
    let mut params = Vec::new();
    for p in &f.params {
        if p.space != StateSpace::Param {
            return Err(err(
                p.line,
                format!("kernel parameter `{}` must be in .param space", p.name),
            ));
        }
        let size = decl_size(p)?;
        if size == 0 || size > 32 * 1024 {
            return Err(err(
                p.line,
                format!("bad size for kernel parameter `{}`", p.name),
            ));
        }
        params.push(ParamInfo {
            name: p.name.clone(),
            size: size as u32,
            align: decl_align(p) as u32,
            pointer_sized: matches!(p.ty.as_str(), "u64" | "b64" | "s64")
                && p.dims.is_empty()
                && p.vec == 1,
        });
    }
    let info = KernelInfo {
        name: f.name.clone(),
        params,
    };
    // CUDA caps a kernel's parameter space; refusing more here keeps every later layout (the
    // emulator's, the host's argument block) free of overflow.
    if info.checked_param_layout(crate::MAX_PARAM_BYTES).is_none() {
        return Err(err(
            f.line,
            format!(
                "kernel `{}` declares more than {} bytes of parameters",
                f.name,
                crate::MAX_PARAM_BYTES
            ),
        ));
    }
    Ok(info)
}

/// The defined `.entry` kernels of a module, in source order, without lowering any body (the
/// module may use instructions [`lower`] refuses).
pub(crate) fn entry_signatures(m: &ast::ModuleAst) -> Result<Vec<KernelInfo>, LoadError> {
    m.funcs
        .iter()
        .filter(|f| f.is_entry && f.body.is_some())
        .map(kernel_info)
        .collect()
}

/// Each defined entry's parameter declarations as PTX writes them (`.u64`, `.align 8 .b8[12]`),
/// parallel to [`entry_signatures`].
pub(crate) fn entry_param_types(m: &ast::ModuleAst) -> Vec<Vec<String>> {
    m.funcs
        .iter()
        .filter(|f| f.is_entry && f.body.is_some())
        .map(|f| {
            f.params
                .iter()
                .map(|p| {
                    let mut s = String::new();
                    if let Some(a) = p.align {
                        s.push_str(&format!(".align {a} "));
                    }
                    if p.vec > 1 {
                        s.push_str(&format!(".v{} ", p.vec));
                    }
                    s.push('.');
                    s.push_str(&p.ty);
                    for d in &p.dims {
                        match d {
                            Some(n) => s.push_str(&format!("[{n}]")),
                            None => s.push_str("[]"),
                        }
                    }
                    s
                })
                .collect()
        })
        .collect()
}

pub(crate) fn lower(m: &ast::ModuleAst) -> Result<(Program, Vec<KernelInfo>), LoadError> {
    let mut cx = ModuleCtx {
        globals: HashMap::new(),
        func_ids: HashMap::new(),
        module_data: Vec::new(),
        shared_next: 0,
        shared_dyn_align: 16,
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

    // Static shared memory must be laid out before any `.extern .shared` offset is known.
    let mut shared_static = 0u64;
    let mut shared_dyn_align = 16u64;
    let shared_decls = m.vars.iter().chain(m.funcs.iter().flat_map(|f| {
        f.body
            .iter()
            .flatten()
            .filter_map(|s| if let Stmt::Var(d) = s { Some(d) } else { None })
    }));
    for d in shared_decls.filter(|d| d.space == StateSpace::Shared) {
        if d.is_extern || d.dims.iter().any(|x| x.is_none()) {
            shared_dyn_align = shared_dyn_align.max(decl_align(d));
        } else {
            shared_static = align_up(shared_static, decl_align(d)) + decl_size(d)?;
            if shared_static > MAX_SHARED_STATIC {
                return Err(err(d.line, "static shared memory exceeds 1 MiB"));
            }
        }
    }
    let shared_dyn_off = align_up(shared_static, shared_dyn_align);
    cx.shared_dyn_align = shared_dyn_align;

    for v in &m.vars {
        module_var(&mut cx, v, shared_dyn_off)?;
    }

    // Function ids first, so calls can refer forward.
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
                    let size = decl_size(p)?;
                    let at = align_up(cx.tparam_next, decl_align(p));
                    cx.tparam_next = at + size;
                    if cx.tparam_next - TPARAM_FLAG > MAX_TPARAM {
                        return Err(err(p.line, "too much parameter space"));
                    }
                    out.push(((at) as u32, size as u32));
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

    let mut shared_cursor = SharedCursor {
        next: 0,
        dyn_off: shared_dyn_off,
    };
    // Module-level static shared vars took the first offsets in module_var; continue after them.
    shared_cursor.next = cx.shared_next;
    let mut kernels = Vec::new();
    let mut kernel_funcs = Vec::new();
    for (fi, f) in m.funcs.iter().enumerate() {
        let Some(body) = &f.body else { continue };
        let entry = cx.code.len() as u32;
        cx.func_entry[fi] = Some(entry);
        if f.is_entry {
            let info = kernel_info(f)?;
            kernel_funcs.push(fi);
            kernels.push(info);
        }
        FnLower::run(
            &mut cx,
            m,
            fi,
            f,
            body,
            &mut shared_cursor,
            kernels.last().filter(|_| f.is_entry),
        )?;
    }
    // Entries are 0-based positions; an empty program still needs nothing past its end.
    let mut funcs = Vec::new();
    for (fi, f) in m.funcs.iter().enumerate() {
        let _ = f;
        funcs.push(FuncInfo {
            entry_pc: cx.func_entry[fi].unwrap_or(u32::MAX),
        });
    }
    check_recursion(&cx, m)?;
    let mut linked_code = std::mem::take(&mut cx.code);
    let entries: Vec<u32> = funcs.iter().map(|f| f.entry_pc).collect();
    for inst in &mut linked_code {
        if let Op::Call { target, .. } = &mut inst.op {
            let pc = entries.get(*target as usize).copied().unwrap_or(u32::MAX);
            if pc == u32::MAX {
                return Err(err(inst.line, "call to a function without a body"));
            }
            *target = pc;
        }
    }
    cx.code = linked_code;
    // Symbol addresses in initializers (pointer tables).
    for (off, size, name, add, line) in std::mem::take(&mut cx.sym_inits) {
        let v = match cx.globals.get(&name) {
            Some(Sym::Addr(sp, a)) => generic_of(*sp, *a).wrapping_add(add as u64),
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
    let prog = Program {
        code: cx.code,
        funcs,
        kernel_funcs,
        num_regs: cx.num_regs,
        num_preds: cx.num_preds,
        shared_static: shared_cursor.next as u32,
        shared_dyn_off: shared_dyn_off as u32,
        local_size: align_up(cx.local_next, 16) as u32,
        tparam_size: align_up(cx.tparam_next - TPARAM_FLAG, 16) as u32,
        module_data: cx.module_data,
    };
    Ok((prog, kernels))
}

fn generic_of(sp: Space, a: u64) -> u64 {
    match sp {
        Space::Shared => SHARED_WIN + a,
        Space::Local => LOCAL_WIN + a,
        Space::Param => PARAM_WIN + a,
        _ => a,
    }
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

fn module_var(cx: &mut ModuleCtx, v: &VarDecl, dyn_off: u64) -> Result<(), LoadError> {
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
            if v.is_extern || v.dims.iter().any(|d| d.is_none()) {
                Sym::Addr(Space::Shared, dyn_off)
            } else {
                let at = align_up(cx.shared_next, decl_align(v));
                cx.shared_next = at + decl_size(v)?;
                Sym::Addr(Space::Shared, at)
            }
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

struct SharedCursor {
    next: u64,
    dyn_off: u64,
}

struct FnLower<'c, 'm> {
    cx: &'c mut ModuleCtx,
    m: &'m ast::ModuleAst,
    fi: u32,
    scopes: Vec<HashMap<String, Sym>>,
    labels: HashMap<String, u32>,
    /// (code index, label, line) to patch once all labels are known.
    fixups: Vec<(usize, String, u32)>,
    sink_reg: u32,
    sink_pred: u32,
}

impl<'c, 'm> FnLower<'c, 'm> {
    fn run(
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
        // Falling off the end of a body returns (nvcc always ends with ret, hand-written PTX may not).
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

    fn lookup(&self, name: &str) -> Option<Sym> {
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
                let at = align_up(self.cx.local_next, decl_align(d));
                self.cx.local_next = at + decl_size(d)?;
                if self.cx.local_next > MAX_LOCAL {
                    return Err(err(d.line, "local memory exceeds 1 MiB per thread"));
                }
                self.declare(d.line, &d.name, Sym::Addr(Space::Local, at))
            }
            StateSpace::Shared => {
                let off = if d.is_extern || d.dims.iter().any(|x| x.is_none()) {
                    shared.dyn_off
                } else {
                    let at = align_up(shared.next, decl_align(d));
                    shared.next = at + decl_size(d)?;
                    at
                };
                self.declare(d.line, &d.name, Sym::Addr(Space::Shared, off))
            }
            StateSpace::Param => {
                let at = align_up(self.cx.tparam_next, decl_align(d));
                self.cx.tparam_next = at + decl_size(d)?;
                if self.cx.tparam_next - TPARAM_FLAG > MAX_TPARAM {
                    return Err(err(d.line, "too much parameter space"));
                }
                self.declare(d.line, &d.name, Sym::Addr(Space::Param, at))
            }
            StateSpace::Global | StateSpace::Const => {
                // Function-scope globals behave like module-level ones with a private name.
                let name = d.name.clone();
                let mut g = d.clone();
                g.name = format!("{}::{}", self.fi, name);
                module_var(self.cx, &g, shared.dyn_off)?;
                let s = *self
                    .cx
                    .globals
                    .get(&g.name)
                    .ok_or_else(|| err(d.line, "internal: variable lost"))?;
                self.declare(d.line, &name, s)
            }
        }
    }

    fn push(&mut self, line: u32, guard: Option<(u32, bool)>, op: Op) {
        self.cx.code.push(Inst { op, guard, line });
    }

    // ---- operands ----

    fn name_sym(&self, line: u32, name: &str) -> Result<Sym, LoadError> {
        self.lookup(name)
            .ok_or_else(|| err(line, format!("unknown name `{name}`")))
    }

    fn dst(&mut self, line: u32, o: &Operand, k: K) -> Result<u32, LoadError> {
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

    fn psrc(&mut self, line: u32, o: &Operand) -> Result<PSrc, LoadError> {
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

    fn src(&mut self, line: u32, o: &Operand, k: K) -> Result<Src, LoadError> {
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

    fn addr(&mut self, line: u32, o: &Operand) -> Result<(Addr, Option<Space>), LoadError> {
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

    fn nops(&self, i: &ast::Inst, n: usize) -> Result<(), LoadError> {
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

    fn op(&self, i: &'m ast::Inst, k: usize) -> Result<&'m Operand, LoadError>
    where
        'm: 'm,
    {
        i.operands
            .get(k)
            .ok_or_else(|| err(i.line, format!("`{}`: missing operand {}", i.opcode, k + 1)))
    }

    fn guard(&mut self, i: &ast::Inst) -> Result<Option<(u32, bool)>, LoadError> {
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

    // ---- instructions ----

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
            "sad" => {
                self.nops(i, 4)?;
                let t = md.one_type()?;
                let t = int_ty(&md, t)?;
                let k = K::Int(t.bits);
                Op::Int3 {
                    op: I3::Sad,
                    t,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    c: self.src(line, self.op(i, 3)?, k)?,
                }
            }
            "add" | "sub" | "mul" | "div" | "rem" | "and" | "or" | "xor" | "shl" | "shr"
            | "min" | "max" | "mul24" | "copysign" => self.binary(i, &mut md)?,
            "mad" | "fma" | "mad24" => self.ternary(i, &mut md)?,
            "not" | "cnot" | "neg" | "abs" | "popc" | "clz" | "brev" | "bfind" | "sqrt" | "rcp"
            | "rsqrt" | "sin" | "cos" | "ex2" | "lg2" | "tanh" => self.unary(i, &mut md)?,
            "bfe" | "prmt" | "shf" | "szext" | "dp4a" | "dp2a" => self.bits3(i, &mut md)?,
            "bfi" => {
                self.nops(i, 5)?;
                let t = md.one_type()?;
                let t = int_ty(&md, t)?;
                let k = K::Int(t.bits);
                Op::Bfi {
                    t,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    c: self.src(line, self.op(i, 3)?, K::Int(32))?,
                    e: self.src(line, self.op(i, 4)?, K::Int(32))?,
                }
            }
            "cvt" => self.cvt(i, &mut md)?,
            "setp" | "set" => self.setp(i, &mut md)?,
            "selp" => {
                self.nops(i, 4)?;
                let t = parse_ty(md.one_type()?).ok_or_else(|| md.err("bad type"))?;
                let k = kind_of(t);
                Op::Selp {
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    p: self.psrc(line, self.op(i, 3)?)?,
                }
            }
            "slct" => {
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
                Op::Slct {
                    t: ct,
                    ftz,
                    d: self.dst(line, self.op(i, 0)?, k)?,
                    a: self.src(line, self.op(i, 1)?, k)?,
                    b: self.src(line, self.op(i, 2)?, k)?,
                    c: self.src(line, self.op(i, 3)?, kind_of(ct))?,
                }
            }
            "testp" => {
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
                Op::Testp {
                    kind,
                    f,
                    d: self.dst(line, self.op(i, 0)?, K::Pred)?,
                    a: self.src(line, self.op(i, 1)?, K::F(f))?,
                }
            }
            "bra" => {
                md.has("uni");
                self.nops(i, 1)?;
                let Operand::Name(l) = self.op(i, 0)? else {
                    return Err(err(line, "bra needs a label"));
                };
                self.fixups.push((self.cx.code.len(), l.clone(), line));
                Op::Bra { target: 0 }
            }
            "ret" => {
                md.has("uni");
                Op::Ret
            }
            "exit" => Op::Exit,
            "trap" => Op::Trap,
            "brkpt" => Op::Nop,
            "call" => return self.call(i, &mut md, g),
            "bar" | "barrier" => self.bar(i, &mut md)?,
            "membar" | "fence" => {
                md.one_of(&["cta", "gl", "sys", "gpu", "cluster"]);
                md.one_of(&["sc", "acq_rel", "acquire", "release"]);
                md.has("proxy");
                md.has("async");
                Op::Nop
            }
            "prefetch" | "prefetchu" | "nanosleep" | "pmevent" => {
                md.list
                    .iter()
                    .enumerate()
                    .for_each(|(k, _)| md.used[k] = true);
                Op::Nop
            }
            "shfl" => self.shfl(i, &mut md)?,
            "vote" => self.vote(i, &mut md)?,
            "activemask" => {
                md.has("b32");
                self.nops(i, 1)?;
                Op::Activemask {
                    d: self.dst(line, self.op(i, 0)?, K::Int(32))?,
                }
            }
            "redux" => self.redux(i, &mut md)?,
            "match" => self.match_(i, &mut md)?,
            "atom" | "red" => self.atom(i, &mut md)?,
            _ => return Err(err(line, format!("unsupported instruction `{}`", i.opcode))),
        };
        md.finish()?;
        self.push(line, g, op);
        Ok(())
    }

    fn mov(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn space(&self, md: &mut Mods<'_>) -> Option<Space> {
        md.one_of(&["global", "shared", "local", "param", "const"])
            .map(|s| match s {
                "global" => Space::Global,
                "shared" => Space::Shared,
                "local" => Space::Local,
                "param" => Space::Param,
                _ => Space::Const,
            })
    }

    fn ld(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let sp = self.space(md).unwrap_or(if md.base == "ldu" {
            Space::Global
        } else {
            Space::Generic
        });
        md.has("cta");
        md.one_of(&["shared::cta", "shared::cluster"]);
        md.ignore_mem_hints();
        let n = match md.one_of(&["v2", "v4"]) {
            Some("v2") => 2,
            Some(_) => 4,
            None => 1,
        };
        let t = md.one_type()?;
        if t == "pred" || t == "b128" {
            return Err(md.err("unsupported type"));
        }
        let size = type_size(t).ok_or_else(|| md.err("bad type"))?;
        let sign = t.starts_with('s');
        let k = parse_ty(t).map(kind_of).unwrap_or(K::Int(size as u8 * 8));
        let mut d = [None; 4];
        match (self.op(i, 0)?, n) {
            (Operand::Vec(parts), n) if parts.len() == n => {
                for (k2, p) in parts.iter().enumerate() {
                    d[k2] = match p {
                        Operand::Sink => None,
                        p => Some(self.dst(line, p, k)?),
                    };
                }
            }
            (o, 1) => d[0] = Some(self.dst(line, o, k)?),
            _ => return Err(md.err("destination does not match the vector width")),
        }
        let (addr, sym_sp) = self.addr(line, self.op(i, 1)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        Ok(Op::Ld {
            sp,
            size: size as u8,
            sign,
            n: n as u8,
            d,
            addr,
        })
    }

    /// A symbol's own space must agree with the instruction's (a generic access to a symbol uses
    /// the symbol's generic address instead).
    fn check_space(&self, line: u32, sp: Space, sym: Option<Space>) -> Result<Space, LoadError> {
        match sym {
            None => Ok(sp),
            Some(s) if s == sp => Ok(sp),
            Some(Space::Global) if sp == Space::Const || sp == Space::Generic => Ok(sp),
            Some(Space::Const) if sp == Space::Global || sp == Space::Generic => Ok(sp),
            Some(s) => Err(err(
                line,
                format!("symbol in {s:?} space accessed as {sp:?}"),
            )),
        }
    }

    fn st(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let sp = self.space(md).unwrap_or(Space::Generic);
        if sp == Space::Const {
            return Err(md.err("cannot store to .const"));
        }
        md.one_of(&["shared::cta", "shared::cluster"]);
        md.ignore_mem_hints();
        let n = match md.one_of(&["v2", "v4"]) {
            Some("v2") => 2,
            Some(_) => 4,
            None => 1,
        };
        let t = md.one_type()?;
        if t == "pred" || t == "b128" {
            return Err(md.err("unsupported type"));
        }
        let size = type_size(t).ok_or_else(|| md.err("bad type"))?;
        let k = parse_ty(t).map(kind_of).unwrap_or(K::Int(size as u8 * 8));
        let mut s = [Src::I(0); 4];
        match (self.op(i, 1)?, n) {
            (Operand::Vec(parts), n) if parts.len() == n => {
                for (k2, p) in parts.iter().enumerate() {
                    s[k2] = self.src(line, p, k)?;
                }
            }
            (o, 1) => s[0] = self.src(line, o, k)?,
            _ => return Err(md.err("source does not match the vector width")),
        }
        let (addr, sym_sp) = self.addr(line, self.op(i, 0)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        Ok(Op::St {
            sp,
            size: size as u8,
            n: n as u8,
            s,
            addr,
        })
    }

    fn cvta(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 2)?;
        let to = md.has("to");
        let sp = self
            .space(md)
            .ok_or_else(|| md.err("missing state space"))?;
        let t = md.one_type()?;
        let bits = match t {
            "u64" | "b64" => 64,
            "u32" | "b32" => 32,
            _ => return Err(md.err("cvta takes .u32 or .u64")),
        };
        let it = IT {
            bits,
            signed: false,
        };
        let d = self.dst(line, self.op(i, 0)?, K::Int(bits))?;
        // A symbol operand is its state-space address.
        let a = self.src(line, self.op(i, 1)?, K::Int(bits))?;
        let win = match sp {
            Space::Shared => SHARED_WIN,
            Space::Local => LOCAL_WIN,
            Space::Param => PARAM_WIN,
            _ => 0,
        };
        Ok(if win == 0 {
            Op::Mov { d, a }
        } else if to {
            Op::Int2 {
                op: I2::Sub,
                t: it,
                d,
                a,
                b: Src::I(win),
            }
        } else {
            Op::Int2 {
                op: I2::Add,
                t: it,
                d,
                a,
                b: Src::I(win),
            }
        })
    }

    fn binary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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
        if matches!(t, "f16x2" | "bf16x2") {
            let f = if t == "f16x2" { FT::F16 } else { FT::BF16 };
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

    fn ternary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        self.nops(i, 4)?;
        let t = md.one_type()?;
        if matches!(t, "f16x2" | "bf16x2") {
            let f = if t == "f16x2" { FT::F16 } else { FT::BF16 };
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

    fn unary(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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
        if matches!(t, "f16x2" | "bf16x2") && matches!(base, "neg" | "abs") {
            let f = if t == "f16x2" { FT::F16 } else { FT::BF16 };
            md.has("ftz");
            // Sign-bit operations on both halves: an integer xor/and does it exactly.
            let (op, mask) = if base == "neg" {
                (I2::Xor, 0x8000_8000u64)
            } else {
                (I2::And, 0x7fff_7fffu64)
            };
            let _ = f;
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

    fn bits3(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let base = md.base;
        let (op, t) = match base {
            "bfe" => {
                let t = md.one_type()?;
                (I3::Bfe, int_ty(md, t)?)
            }
            "prmt" => {
                if md
                    .one_of(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
                    .is_some()
                {
                    return Err(md.err("prmt modes are not supported"));
                }
                let t = md.one_type()?;
                (I3::Prmt, int_ty(md, t)?)
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
                (I3::Shf(right | clamp), int_ty(md, t)?)
            }
            "szext" => {
                let m = md
                    .one_of(&["clamp", "wrap"])
                    .ok_or_else(|| md.err("needs .clamp or .wrap"))?;
                let t = md.one_type()?;
                let t = int_ty(md, t)?;
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

    fn carry(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn cvt(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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
        if matches!(tys[0], "f16x2" | "bf16x2") {
            self.nops(i, 3)?;
            if tys[1] != "f32" {
                return Err(md.err("packed conversion needs .f32 sources"));
            }
            let f = if tys[0] == "f16x2" { FT::F16 } else { FT::BF16 };
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

    fn setp(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn pdst_opt(&mut self, line: u32, o: &Operand) -> Result<Option<u32>, LoadError> {
        match o {
            Operand::Sink => Ok(None),
            o => Ok(Some(self.dst(line, o, K::Pred)?)),
        }
    }

    fn call(
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

    fn bar(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn shfl(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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
        let (d, p) = match self.op(i, 0)? {
            Operand::Pair(x, y) => (self.dst(line, x, K::Int(32))?, self.pdst_opt(line, y)?),
            o => (self.dst(line, o, K::Int(32))?, None),
        };
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

    fn vote(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn redux(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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

    fn match_(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
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
        let (d, p) = match self.op(i, 0)? {
            Operand::Pair(x, y) => (self.dst(line, x, K::Int(32))?, self.pdst_opt(line, y)?),
            o => (self.dst(line, o, K::Int(32))?, None),
        };
        Ok(Op::Match {
            all,
            bits,
            d,
            p,
            a: self.src(line, self.op(i, 1)?, K::Int(bits))?,
            mask: self.src(line, self.op(i, 2)?, K::Int(32))?,
        })
    }

    fn atom(&mut self, i: &'m ast::Inst, md: &mut Mods<'m>) -> Result<Op, LoadError> {
        let line = i.line;
        let is_red = md.base == "red";
        let sp = self.space(md).unwrap_or(Space::Generic);
        if !matches!(sp, Space::Generic | Space::Global | Space::Shared) {
            return Err(md.err("atomics work on global, shared or generic addresses"));
        }
        md.ignore_mem_hints();
        md.has("noftz");
        let op = match md.one_of(&[
            "add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas",
        ]) {
            Some("add") => AtomOp::Add,
            Some("min") => AtomOp::Min,
            Some("max") => AtomOp::Max,
            Some("inc") => AtomOp::Inc,
            Some("dec") => AtomOp::Dec,
            Some("and") => AtomOp::And,
            Some("or") => AtomOp::Or,
            Some("xor") => AtomOp::Xor,
            Some("exch") => AtomOp::Exch,
            Some(_) => AtomOp::Cas,
            None => return Err(md.err("missing atomic operation")),
        };
        let t = match md.one_type()? {
            "u32" => AtomTy::U32,
            "s32" => AtomTy::S32,
            "u64" => AtomTy::U64,
            "s64" => AtomTy::S64,
            "b32" => AtomTy::B32,
            "b64" => AtomTy::B64,
            "f32" => AtomTy::F32,
            "f64" => AtomTy::F64,
            "f16" => AtomTy::F16,
            "f16x2" => AtomTy::F16x2,
            "bf16" => AtomTy::BF16,
            "bf16x2" => AtomTy::BF16x2,
            _ => return Err(md.err("unsupported atomic type")),
        };
        let float = matches!(
            t,
            AtomTy::F32 | AtomTy::F64 | AtomTy::F16 | AtomTy::F16x2 | AtomTy::BF16 | AtomTy::BF16x2
        );
        let ok = match op {
            AtomOp::Add => !matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Min | AtomOp::Max => !float && !matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Inc | AtomOp::Dec => t == AtomTy::U32,
            AtomOp::And | AtomOp::Or | AtomOp::Xor => matches!(t, AtomTy::B32 | AtomTy::B64),
            AtomOp::Exch | AtomOp::Cas => matches!(
                t,
                AtomTy::B32 | AtomTy::B64 | AtomTy::U32 | AtomTy::U64 | AtomTy::S32 | AtomTy::S64
            ),
        };
        if !ok
            || (matches!(
                t,
                AtomTy::F16 | AtomTy::BF16 | AtomTy::F16x2 | AtomTy::BF16x2
            ) && op != AtomOp::Add)
        {
            return Err(md.err("operation not defined for this type"));
        }
        let bits = match t {
            AtomTy::U64 | AtomTy::S64 | AtomTy::B64 | AtomTy::F64 => 64,
            AtomTy::F16 | AtomTy::BF16 => 16,
            _ => 32,
        };
        let k = match t {
            AtomTy::F32 => K::F(FT::F32),
            AtomTy::F64 => K::F(FT::F64),
            _ => K::Int(bits),
        };
        let first = if is_red { 0 } else { 1 };
        let n = first + 2 + (op == AtomOp::Cas) as usize;
        self.nops(i, n)?;
        let d = if is_red {
            None
        } else {
            Some(self.dst(line, self.op(i, 0)?, k)?)
        };
        let (addr, sym_sp) = self.addr(line, self.op(i, first)?)?;
        let sp = self.check_space(line, sp, sym_sp)?;
        let b = self.src(line, self.op(i, first + 1)?, k)?;
        let c = if op == AtomOp::Cas {
            self.src(line, self.op(i, first + 2)?, k)?
        } else {
            Src::I(0)
        };
        Ok(Op::Atom {
            sp,
            op,
            t,
            d,
            addr,
            b,
            c,
        })
    }
}

fn int_ty(md: &Mods<'_>, t: &str) -> Result<IT, LoadError> {
    match parse_ty(t) {
        Some(Ty::I(it)) => Ok(it),
        _ => Err(md.err("needs an integer type")),
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
