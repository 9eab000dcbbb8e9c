//! The parsed module, before validation: names are still strings and opcodes still dotted words.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateSpace {
    Global,
    Shared,
    Local,
    Param,
    Const,
    Reg,
}

#[derive(Debug, Clone)]
pub(crate) enum InitElem {
    Int(u64),
    F32(u32),
    F64(u64),
    Float(f64),
    /// Address of a symbol plus an offset (`generic(sym)+4` or `sym`).
    Sym(String, i64),
}

/// A variable or parameter declaration (`.shared .align 4 .b8 smem[1024];`, `.param .u64 p`).
#[derive(Debug, Clone)]
pub(crate) struct VarDecl {
    pub line: u32,
    pub space: StateSpace,
    pub align: Option<u32>,
    /// Element type word without the dot, e.g. "b8", "u32", "f32", "pred".
    pub ty: String,
    /// `.v2`/`.v4` element count, 1 when scalar.
    pub vec: u32,
    pub name: String,
    /// Array dimensions; `None` for a dimension written `[]`.
    pub dims: Vec<Option<u64>>,
    pub init: Option<Vec<InitElem>>,
    pub is_extern: bool,
    /// For `.reg .b32 %r<5>`: declares `%r0`..`%r4`.
    pub range: Option<u32>,
}

#[derive(Debug, Clone)]
pub(crate) enum Operand {
    /// A register, symbol or label name.
    Name(String),
    Int(u64),
    F32(u32),
    F64(u64),
    Float(f64),
    /// `[base+off]`; base is a name or absent (`[0x100]`).
    Addr(Option<String>, i64),
    /// `{a, b, ...}` vector operand.
    Vec(Vec<Operand>),
    /// `!%p`.
    Not(Box<Operand>),
    /// `%p|%q` dual destination.
    Pair(Box<Operand>, Box<Operand>),
    /// `(a, b)` list in a call.
    List(Vec<Operand>),
    /// `_` sink.
    Sink,
    /// `sym+off` used as a value.
    SymOff(String, i64),
}

#[derive(Debug, Clone)]
pub(crate) struct Inst {
    pub line: u32,
    pub guard: Option<(String, bool)>,
    pub opcode: String,
    pub operands: Vec<Operand>,
}

#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    Var(VarDecl),
    Label(u32, String),
    Inst(Inst),
    Open,
    Close(u32),
}

#[derive(Debug, Clone)]
pub(crate) struct Function {
    pub line: u32,
    pub is_entry: bool,
    pub name: String,
    pub rets: Vec<VarDecl>,
    pub params: Vec<VarDecl>,
    /// None for a declaration (prototype) such as `.extern .func vprintf(...)`.
    pub body: Option<Vec<Stmt>>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ModuleAst {
    pub vars: Vec<VarDecl>,
    pub funcs: Vec<Function>,
}
