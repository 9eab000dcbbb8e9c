//! The pre-decoded instruction form the executor runs: registers are indices, symbols are
//! addresses, modifiers are enums, and every instruction has been validated.

/// Generic-address windows for the per-CTA and per-thread state spaces. Global allocations lie
/// below `memory::GLOBAL_LIMIT`; these lie above it, so one comparison routes a generic access.
pub(crate) const SHARED_WIN: u64 = 0x7100_0000_0000;
pub(crate) const LOCAL_WIN: u64 = 0x7200_0000_0000;
pub(crate) const PARAM_WIN: u64 = 0x7300_0000_0000;
/// Module `.global`/`.const` variables. Their state-space addresses equal their generic ones.
pub(crate) const MODULE_WIN: u64 = 0x7400_0000_0000;
pub(crate) const WIN_SIZE: u64 = 0x0100_0000_0000;
/// Param-space addresses at or above this are the per-thread call area; below, the kernel's
/// argument block.
pub(crate) const TPARAM_FLAG: u64 = 0x8000_0000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    R(u32),
    I(u64),
}

/// A predicate source: register (optionally negated) or constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PSrc {
    R(u32, bool),
    I(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Addr {
    pub base: Option<u32>,
    pub off: i64,
    /// The base register is 32 bits wide: only its low half is the address.
    pub base32: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
    Const,
}

impl Space {
    /// Where this space's window starts in the generic address space; 0 for the spaces whose
    /// addresses already are generic ones.
    pub(crate) fn generic_base(self) -> u64 {
        match self {
            Space::Shared => SHARED_WIN,
            Space::Local => LOCAL_WIN,
            Space::Param => PARAM_WIN,
            Space::Generic | Space::Global | Space::Const => 0,
        }
    }
}

/// Integer type: width and signedness (`.b` types count as unsigned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IT {
    pub bits: u8,
    pub signed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FT {
    F16,
    BF16,
    F32,
    F64,
}

/// Any scalar type as it appears in a `cvt` or `setp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    I(IT),
    F(FT),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rnd {
    N,
    Z,
    M,
    P,
    /// Round to nearest, ties away from zero (`cvt.rna`).
    A,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum I2 {
    Add,
    Sub,
    MulLo,
    MulHi,
    Mul24Lo,
    /// Bits 47..16 of the 48-bit product of the low 24 bits.
    Mul24Hi,
    Div,
    Rem,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Min,
    Max,
    AddSat,
    SubSat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum I1 {
    Not,
    CNot,
    Neg,
    Abs,
    Popc,
    Clz,
    Brev,
    /// Bit index of the most significant non-sign bit (`bfind`), 0xffffffff if none.
    Bfind,
    BfindShift,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum I3 {
    MadLo,
    MadHi,
    MadWide,
    Mad24Lo,
    Mad24Hi,
    MadLoCC,
    Bfe,
    Prmt,
    /// `shf.l.wrap`/`shf.r.clamp`: funnel shifts (bit 0: right, bit 1: clamp).
    Shf(u8),
    Szext,
    Dp4a,
    /// `dp2a.lo` (false) / `dp2a.hi` (true): two 16x8-bit products plus c.
    Dp2a(bool),
    /// `sad`: c + |a - b|.
    Sad,
}

/// Carry-chain arithmetic (`add.cc`, `addc`, `mad.lo.cc`, `madc.hi`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CarryKind {
    Add,
    Sub,
    MadLo,
    MadHi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum F2 {
    Add,
    Sub,
    Mul,
    Div,
    /// `div.approx.f32`: `a * (1/b)`; a sign-preserving zero (NaN for an infinite `a`) once
    /// `|b| > 2^126`, as PTX documents. Otherwise correctly rounded (see APPROX.md).
    DivApprox,
    Min,
    Max,
    MinNaN,
    MaxNaN,
    Copysign,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum F1 {
    Neg,
    Abs,
    Sqrt,
    Rcp,
    Rsqrt,
    Sin,
    Cos,
    Ex2,
    Lg2,
    Tanh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Inc,
    Dec,
    And,
    Or,
    Xor,
    Exch,
    Cas,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomTy {
    U32,
    S32,
    U64,
    S64,
    F32,
    F64,
    B32,
    B64,
    F16x2,
    F16,
    BF16,
    BF16x2,
}

impl AtomTy {
    /// Width of the memory an atomic of this type reads and writes (both halves of a packed
    /// pair count).
    pub(crate) fn bits(self) -> u8 {
        match self {
            AtomTy::U64 | AtomTy::S64 | AtomTy::B64 | AtomTy::F64 => 64,
            AtomTy::F16 | AtomTy::BF16 => 16,
            AtomTy::U32
            | AtomTy::S32
            | AtomTy::B32
            | AtomTy::F32
            | AtomTy::F16x2
            | AtomTy::BF16x2 => 32,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VoteMode {
    Ballot,
    Any,
    All,
    Uni,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduxOp {
    Add,
    Min,
    Max,
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestpKind {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

/// A byte copy within the per-thread param area (call argument/return passing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Copy3 {
    pub from: u32,
    pub to: u32,
    pub len: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    Nop,
    Mov {
        d: u32,
        a: Src,
    },
    MovP {
        d: u32,
        a: PSrc,
    },
    /// `mov.b64 %rd, {%r1, %r2}`: little-endian concatenation of `n` `bits`-wide parts.
    Pack {
        d: u32,
        a: [Src; 4],
        n: u8,
        bits: u8,
    },
    Unpack {
        d: [Option<u32>; 4],
        n: u8,
        bits: u8,
        a: Src,
    },
    Int2 {
        op: I2,
        t: IT,
        d: u32,
        a: Src,
        b: Src,
    },
    Int1 {
        op: I1,
        t: IT,
        d: u32,
        a: Src,
    },
    Int3 {
        op: I3,
        t: IT,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Carry {
        kind: CarryKind,
        bits: u8,
        cin: bool,
        cout: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Bfi {
        t: IT,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        e: Src,
    },
    MulWide {
        t: IT,
        d: u32,
        a: Src,
        b: Src,
    },
    F2 {
        op: F2,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
    },
    F1 {
        op: F1,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        approx: bool,
        d: u32,
        a: Src,
    },
    Fma {
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// Packed `f16x2`/`bf16x2` arithmetic: the scalar op applied to both halves.
    F2x2 {
        op: F2,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
    },
    Fmax2 {
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Cvt {
        dt: Ty,
        st: Ty,
        rnd: Option<Rnd>,
        int_rnd: bool,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
    },
    /// `cvt.rn.f16x2.f32 d, a, b`: d = {hi: a, lo: b}.
    CvtPack {
        f: FT,
        rnd: Rnd,
        d: u32,
        a: Src,
        b: Src,
    },
    Setp {
        t: Ty,
        cmp: Cmp,
        ftz: bool,
        d: Option<u32>,
        d2: Option<u32>,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, PSrc)>,
    },
    /// `set.cmp.dtype.stype`: writes all-ones (or 1.0f) / zero.
    Set {
        t: Ty,
        cmp: Cmp,
        ftz: bool,
        float_out: bool,
        d: u32,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, PSrc)>,
    },
    Selp {
        d: u32,
        a: Src,
        b: Src,
        p: PSrc,
    },
    Slct {
        t: Ty,
        ftz: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    PBool {
        op: BoolOp,
        d: u32,
        a: PSrc,
        b: PSrc,
    },
    PNot {
        d: u32,
        a: PSrc,
    },
    Testp {
        kind: TestpKind,
        f: FT,
        d: u32,
        a: Src,
    },
    /// `acquire`: `ld.acquire` or `ld.volatile`, whose later accesses must not be seen before it
    /// (the emulator follows it with an acquire fence).
    Ld {
        sp: Space,
        size: u8,
        sign: bool,
        n: u8,
        d: [Option<u32>; 4],
        addr: Addr,
        acquire: bool,
    },
    /// `release`: `st.release` or `st.volatile`, which must not be seen before the accesses ahead
    /// of it (the emulator puts a release fence before it).
    St {
        sp: Space,
        size: u8,
        n: u8,
        s: [Src; 4],
        addr: Addr,
        release: bool,
    },
    Atom {
        sp: Space,
        op: AtomOp,
        t: AtomTy,
        d: Option<u32>,
        addr: Addr,
        b: Src,
        c: Src,
    },
    Bra {
        target: u32,
    },
    Call {
        target: u32,
        args: Box<[Copy3]>,
    },
    /// Placed right after every `Call`: copies the callee's return values into the caller's
    /// `.param` variables when the call returns here.
    CallRet {
        rets: Box<[Copy3]>,
    },
    Ret,
    Exit,
    Trap,
    /// `fence`/`membar` at any scope: a sequentially consistent fence between the OS threads
    /// that run CTAs and the host (another process, for mapped memory).
    Fence,
    /// `nanosleep.u32 t`: the warp gives up its core for about `t` ns (capped, see
    /// `exec::control`).
    Nanosleep {
        t: Src,
    },
    /// `bar.sync id{, count}` (and `barrier.sync`, `bar.red`): `red` reduces `p` over the CTA.
    Bar {
        id: Src,
        count: Option<Src>,
        red: Option<(ReduxOp, u32, PSrc, bool)>,
    },
    BarWarp {
        mask: Src,
    },
    Shfl {
        mode: ShflMode,
        d: u32,
        p: Option<u32>,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    Vote {
        mode: VoteMode,
        d: u32,
        p: PSrc,
        mask: Src,
    },
    Activemask {
        d: u32,
    },
    Redux {
        op: ReduxOp,
        signed: bool,
        d: u32,
        a: Src,
        mask: Src,
    },
    Match {
        all: bool,
        bits: u8,
        d: u32,
        p: Option<u32>,
        a: Src,
        mask: Src,
    },
    Vprintf {
        ret: Option<u32>,
        fmt: u32,
        args: u32,
    },
    AssertFail {
        args: u32,
    },
    Clock {
        d: u32,
        bits: u8,
    },
    /// `mov.b32 d, %envregN`: the launch's driver-defined register `n`.
    EnvReg {
        d: u32,
        n: u8,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Inst {
    pub op: Op,
    pub guard: Option<(u32, bool)>,
    pub line: u32,
}

/// How many driver-defined registers (`%envreg0`..`%envreg31`) a launch has.
pub(crate) const ENVREGS: usize = 32;

/// The `N` of `%envregN` (0..[`ENVREGS`]), for a name that is one. They are read-only 32-bit
/// registers whose values the driver sets per launch; only `mov` reads them (as CUDA's headers
/// do), so they take no register slot a warp fills at every start.
pub(crate) fn envreg_index(name: &str) -> Option<u8> {
    let n = name.strip_prefix("%envreg")?;
    // Decimal without a leading zero, as PTX spells them (`%envreg07` is no register).
    if n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if n.len() > 1 && n.starts_with('0') {
        return None;
    }
    n.parse::<u8>().ok().filter(|&i| usize::from(i) < ENVREGS)
}

/// Special registers that live in fixed register slots, filled in per warp.
pub(crate) const SPECIAL_REGS: &[&str] = &[
    "%tid.x",
    "%tid.y",
    "%tid.z",
    "%ntid.x",
    "%ntid.y",
    "%ntid.z",
    "%ctaid.x",
    "%ctaid.y",
    "%ctaid.z",
    "%nctaid.x",
    "%nctaid.y",
    "%nctaid.z",
    "%laneid",
    "%warpid",
    "%nwarpid",
    "%smid",
    "%nsmid",
    "%gridid",
    "%lanemask_eq",
    "%lanemask_le",
    "%lanemask_lt",
    "%lanemask_ge",
    "%lanemask_gt",
    "%dynamic_smem_size",
    "%total_smem_size",
];

pub(crate) struct FuncInfo {
    pub entry_pc: u32,
}

/// A lowered module.
pub(crate) struct Program {
    pub code: Vec<Inst>,
    pub funcs: Vec<FuncInfo>,
    /// Index into `funcs` of each kernel, parallel to `Module::kernels`.
    pub kernel_funcs: Vec<usize>,
    pub num_regs: u32,
    pub num_preds: u32,
    pub shared_static: u32,
    /// Offset of `.extern .shared` arrays (after the static ones, aligned).
    pub shared_dyn_off: u32,
    pub local_size: u32,
    pub tparam_size: u32,
    pub module_data: Vec<u8>,
}
