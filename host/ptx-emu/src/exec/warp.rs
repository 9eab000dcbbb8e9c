//! One warp: 32 lanes with their registers, per-lane program counters and per-thread memory.
//!
//! Scheduling follows independent thread scheduling in its simplest faithful form: the lanes at
//! the lowest program counter run together, so divergent paths serialise and reconverge as soon
//! as they reach the same instruction. While all live lanes share one pc (the common case) the
//! warp stays in a "converged" mode that keeps a single pc and skips the per-lane bookkeeping.

use crate::exec::mem::Loc;
use crate::exec::ops;
use crate::exec::{Budget, CtaCtx, Launch};
use crate::float;
use crate::ir::*;

/// Why an instruction stopped a lane: which lane, and what to tell the user.
pub(crate) struct Trouble {
    pub lane: u32,
    pub msg: String,
}

pub(crate) type R<T> = Result<T, Trouble>;

fn trouble(lane: u32, msg: impl Into<String>) -> Trouble {
    Trouble {
        lane,
        msg: msg.into(),
    }
}

/// Where the lanes of the executing group go next.
pub(crate) enum Flow {
    Next,
    /// Lanes in the mask jump to the target, the rest of the group falls through.
    Branch(u32, u32),
    Exit(u32),
    Call(u32, u32),
    Ret(u32),
    /// Lanes in the mask arrive at a CTA barrier (already counted) and wait.
    Bar(u32, u8),
    /// The group waits here for the other lanes a warp-synchronous op names.
    SyncWait,
}

pub(crate) struct Warp {
    pub regs: Vec<[u64; 32]>,
    pub preds: Vec<u32>,
    pub pc: [u32; 32],
    pub live: u32,
    pub bar_wait: u32,
    pub sync_wait: u32,
    pub converged: bool,
    pub cpc: u32,
    pub bar_id: [u8; 32],
    /// Per-lane carry flag (CC.CF) of the carry-chain instructions.
    pub cc: u32,
    /// For `bar.red`: where each waiting lane gets the reduction (register, is-integer).
    pub bar_dst: [Option<(u32, bool)>; 32],
    pub stacks: Vec<Vec<u32>>,
    pub local: Vec<u8>,
    pub local_size: usize,
    pub tparam: Vec<u8>,
    pub tparam_size: usize,
    pub hint: usize,
    pub index: u32,
}

#[inline(always)]
fn lanes(mask: u32) -> impl Iterator<Item = usize> {
    let mut m = mask;
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros();
            m &= m - 1;
            Some(l as usize)
        }
    })
}

impl Warp {
    pub(crate) fn new(prog: &Program) -> Warp {
        Warp {
            regs: vec![[0u64; 32]; prog.num_regs as usize],
            preds: vec![0u32; prog.num_preds as usize],
            pc: [0; 32],
            live: 0,
            bar_wait: 0,
            sync_wait: 0,
            converged: true,
            cpc: 0,
            bar_id: [0; 32],
            cc: 0,
            bar_dst: [None; 32],
            stacks: vec![Vec::new(); 32],
            local: vec![0u8; prog.local_size as usize * 32],
            local_size: prog.local_size as usize,
            tparam: vec![0u8; prog.tparam_size as usize * 32],
            tparam_size: prog.tparam_size as usize,
            hint: 0,
            index: 0,
        }
    }

    /// Prepares the warp to run warp `index` of a CTA from `entry`.
    pub(crate) fn reset(&mut self, cx: &Launch<'_>, index: u32, ctaid: [u32; 3]) {
        for r in self.regs.iter_mut() {
            *r = [0; 32];
        }
        self.preds.iter_mut().for_each(|p| *p = 0);
        self.local.iter_mut().for_each(|b| *b = 0);
        self.tparam.iter_mut().for_each(|b| *b = 0);
        self.stacks.iter_mut().for_each(|s| s.clear());
        self.index = index;
        self.pc = [cx.entry; 32];
        self.cpc = cx.entry;
        self.converged = true;
        self.bar_wait = 0;
        self.sync_wait = 0;
        self.bar_dst = [None; 32];
        self.cc = 0;
        let [bx, by, bz] = cx.block;
        let mut live = 0u32;
        for l in 0..32u32 {
            let lin = index * 32 + l;
            if lin < cx.nthreads {
                live |= 1 << l;
            }
            let tid = [lin % bx, (lin / bx) % by, lin / (bx * by)];
            let vals: [u64; 25] = [
                tid[0] as u64,
                tid[1] as u64,
                tid[2] as u64,
                bx as u64,
                by as u64,
                bz as u64,
                ctaid[0] as u64,
                ctaid[1] as u64,
                ctaid[2] as u64,
                cx.grid[0] as u64,
                cx.grid[1] as u64,
                cx.grid[2] as u64,
                l as u64,
                index as u64,
                cx.nwarps as u64,
                0,
                1,
                0,
                1u64 << l,
                ((2u64 << l) - 1) & 0xffff_ffff,
                (1u64 << l) - 1,
                (0xffff_ffffu64 << l) & 0xffff_ffff,
                (0xffff_fffeu64 << l) & 0xffff_ffff,
                cx.dyn_shared as u64,
                cx.shared_size as u64,
            ];
            for (slot, v) in vals.iter().enumerate() {
                if let Some(r) = self.regs.get_mut(slot) {
                    r[l as usize] = *v;
                }
            }
        }
        self.live = live;
    }

    pub(crate) fn runnable(&self) -> u32 {
        self.live & !self.bar_wait & !self.sync_wait
    }

    pub(crate) fn tid_of(&self, cx: &Launch<'_>, lane: u32) -> [u32; 3] {
        let lin = self.index * 32 + lane;
        let [bx, by, _] = cx.block;
        [lin % bx, (lin / bx) % by, lin / (bx * by)]
    }

    #[inline(always)]
    fn v(&self, s: Src) -> [u64; 32] {
        match s {
            Src::R(r) => self.regs[r as usize],
            Src::I(x) => [x; 32],
        }
    }

    #[inline(always)]
    fn v1(&self, s: Src, l: usize) -> u64 {
        match s {
            Src::R(r) => self.regs[r as usize][l],
            Src::I(x) => x,
        }
    }

    #[inline(always)]
    fn pm(&self, p: PSrc) -> u32 {
        match p {
            PSrc::R(r, neg) => {
                let m = self.preds[r as usize];
                if neg {
                    !m
                } else {
                    m
                }
            }
            PSrc::I(b) => {
                if b {
                    !0
                } else {
                    0
                }
            }
        }
    }

    #[inline(always)]
    fn w(&mut self, d: u32, v: &[u64; 32], mask: u32) {
        let r = &mut self.regs[d as usize];
        if mask == u32::MAX {
            *r = *v;
        } else {
            for l in 0..32 {
                if mask >> l & 1 != 0 {
                    r[l] = v[l];
                }
            }
        }
    }

    #[inline(always)]
    fn wp(&mut self, d: u32, bits: u32, mask: u32) {
        let p = &mut self.preds[d as usize];
        *p = (*p & !mask) | (bits & mask);
    }

    #[inline(always)]
    fn map1(&mut self, d: u32, a: Src, mask: u32, f: impl Fn(u64) -> u64) {
        let mut o = [0u64; 32];
        let ta;
        let av: &[u64; 32] = match a {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                ta = [x; 32];
                &ta
            }
        };
        for l in 0..32 {
            o[l] = f(av[l]);
        }
        self.w(d, &o, mask);
    }

    #[inline(always)]
    fn map2(&mut self, d: u32, a: Src, b: Src, mask: u32, f: impl Fn(u64, u64) -> u64) {
        let mut o = [0u64; 32];
        let (ta, tb);
        let av: &[u64; 32] = match a {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                ta = [x; 32];
                &ta
            }
        };
        let bv: &[u64; 32] = match b {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                tb = [x; 32];
                &tb
            }
        };
        for l in 0..32 {
            o[l] = f(av[l], bv[l]);
        }
        self.w(d, &o, mask);
    }

    #[inline(always)]
    fn map3(
        &mut self,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        mask: u32,
        f: impl Fn(u64, u64, u64) -> u64,
    ) {
        let mut o = [0u64; 32];
        let (ta, tb, tc);
        let av: &[u64; 32] = match a {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                ta = [x; 32];
                &ta
            }
        };
        let bv: &[u64; 32] = match b {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                tb = [x; 32];
                &tb
            }
        };
        let cv: &[u64; 32] = match c {
            Src::R(r) => &self.regs[r as usize],
            Src::I(x) => {
                tc = [x; 32];
                &tc
            }
        };
        for l in 0..32 {
            o[l] = f(av[l], bv[l], cv[l]);
        }
        self.w(d, &o, mask);
    }

    /// Like `map*`, but only evaluates the lanes in `mask` (for costly ops where most lanes may
    /// be idle).
    #[inline(always)]
    fn sparse3(
        &mut self,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        mask: u32,
        f: impl Fn(u64, u64, u64) -> u64,
    ) {
        for l in lanes(mask) {
            let v = f(self.v1(a, l), self.v1(b, l), self.v1(c, l));
            self.regs[d as usize][l] = v;
        }
    }

    #[inline(always)]
    pub(crate) fn addr(&self, a: &Addr, l: usize) -> u64 {
        let b = match a.base {
            Some(r) => {
                let x = self.regs[r as usize][l];
                if a.base32 {
                    x & 0xffff_ffff
                } else {
                    x
                }
            }
            None => 0,
        };
        b.wrapping_add(a.off as u64)
    }

    fn pick(&self, runnable: u32) -> (u32, u32) {
        let mut min = u32::MAX;
        for l in lanes(runnable) {
            min = min.min(self.pc[l]);
        }
        let mut g = 0u32;
        for l in lanes(runnable | self.sync_wait) {
            if self.pc[l] == min {
                g |= 1 << l;
            }
        }
        (min, g)
    }

    fn materialize(&mut self) {
        if self.converged {
            self.pc = [self.cpc; 32];
            self.converged = false;
        }
    }

    pub(crate) fn try_converge(&mut self) {
        if self.converged || self.sync_wait != 0 || self.live == 0 {
            return;
        }
        // A waiting lane's pc must not move with the others, so converge only when none waits or
        // all do.
        if self.bar_wait != 0 && self.live & !self.bar_wait != 0 {
            return;
        }
        let first = self.live.trailing_zeros() as usize;
        let p = self.pc[first];
        if lanes(self.live).all(|l| self.pc[l] == p) {
            self.converged = true;
            self.cpc = p;
        }
    }

    fn apply(&mut self, pc: u32, group: u32, flow: Flow) {
        match flow {
            Flow::Next => {
                if self.converged {
                    self.cpc = pc + 1;
                    return;
                }
                for l in lanes(group) {
                    self.pc[l] = pc + 1;
                }
            }
            Flow::Branch(taken, t) => {
                if self.converged && (taken == group || taken == 0) {
                    self.cpc = if taken == 0 { pc + 1 } else { t };
                    return;
                }
                self.materialize();
                for l in lanes(group) {
                    self.pc[l] = if taken >> l & 1 != 0 { t } else { pc + 1 };
                }
            }
            Flow::Exit(m) => {
                self.live &= !m;
                if self.converged && m == group {
                    return;
                }
                self.materialize();
                for l in lanes(group & !m) {
                    self.pc[l] = pc + 1;
                }
            }
            Flow::Call(m, t) => {
                for l in lanes(m) {
                    self.stacks[l].push(pc + 1);
                }
                if self.converged && m == group {
                    self.cpc = t;
                    return;
                }
                self.materialize();
                for l in lanes(group) {
                    self.pc[l] = if m >> l & 1 != 0 { t } else { pc + 1 };
                }
            }
            Flow::Ret(m) => {
                self.materialize();
                for l in lanes(group) {
                    if m >> l & 1 != 0 {
                        match self.stacks[l].pop() {
                            Some(r) => self.pc[l] = r,
                            None => self.live &= !(1 << l),
                        }
                    } else {
                        self.pc[l] = pc + 1;
                    }
                }
            }
            Flow::Bar(m, id) => {
                self.bar_wait |= m;
                for l in lanes(m) {
                    self.bar_id[l] = id;
                }
                if self.converged && m == group {
                    self.cpc = pc + 1;
                    return;
                }
                self.materialize();
                for l in lanes(group) {
                    self.pc[l] = pc + 1;
                }
            }
            Flow::SyncWait => {
                self.materialize();
                self.sync_wait |= group;
                return;
            }
        }
        self.try_converge();
    }

    /// Runs until no lane can proceed or `slice` instructions have issued.
    pub(crate) fn run(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        budget: &mut Budget,
        slice: u32,
    ) -> Result<(), crate::ExecError> {
        let code = &cx.prog.code[..];
        for _ in 0..slice {
            let runnable = self.runnable();
            if runnable == 0 {
                if self.sync_wait != 0 {
                    let l = self.sync_wait.trailing_zeros();
                    let line = code.get(self.pc[l as usize] as usize).map_or(0, |i| i.line);
                    return Err(cx.fault(
                        line,
                        cta.ctaid,
                        self.tid_of(cx, l),
                        "deadlock: a warp-synchronous instruction waits for lanes of its membermask that are blocked at a barrier".into(),
                    ));
                }
                return Ok(());
            }
            let (pc, group) = if self.converged {
                (self.cpc, runnable)
            } else {
                self.pick(runnable)
            };
            let Some(inst) = code.get(pc as usize) else {
                let l = group.trailing_zeros();
                return Err(cx.fault(
                    0,
                    cta.ctaid,
                    self.tid_of(cx, l),
                    "execution ran past the end of the program".into(),
                ));
            };
            let n = group.count_ones() as u64;
            if budget.local < n && !budget.refill(cx, n) {
                let l = group.trailing_zeros();
                return Err(crate::ExecError::StepLimit {
                    site: crate::Site {
                        line: inst.line,
                        ctaid: cta.ctaid,
                        tid: self.tid_of(cx, l),
                    },
                    limit: cx.limit,
                });
            }
            budget.local -= n;
            budget.used += n;
            let exec = match inst.guard {
                None => group,
                Some((p, neg)) => {
                    let m = self.preds[p as usize];
                    (if neg { !m } else { m }) & group
                }
            };
            match self.exec(cx, cta, &inst.op, pc, group, exec) {
                Ok(flow) => self.apply(pc, group, flow),
                Err(t) => {
                    return Err(cx.fault(inst.line, cta.ctaid, self.tid_of(cx, t.lane), t.msg))
                }
            }
        }
        Ok(())
    }

    /// Membership rules shared by the warp-synchronous instructions. `Ok(None)`: run now.
    fn sync_check(&mut self, mask: u32, exec: u32, group: u32, what: &str) -> R<Option<Flow>> {
        if exec == 0 {
            return Ok(Some(Flow::Next));
        }
        if exec & !mask != 0 {
            let l = (exec & !mask).trailing_zeros();
            return Err(trouble(
                l,
                format!("{what}: lane {l} executes it but is not in membermask {mask:#010x}"),
            ));
        }
        if mask & !self.live != 0 {
            let l = exec.trailing_zeros();
            return Err(trouble(
                l,
                format!(
                    "{what}: membermask {mask:#010x} names lanes that have exited or do not exist (live lanes {:#010x})",
                    self.live
                ),
            ));
        }
        if mask & !exec != 0 {
            // Guarded-off lanes of the group can never join this execution.
            if mask & group & !exec != 0 {
                let l = exec.trailing_zeros();
                return Err(trouble(l, format!("{what}: membermask {mask:#010x} names lanes whose guard predicate is false")));
            }
            return Ok(Some(Flow::SyncWait));
        }
        self.sync_wait &= !group;
        Ok(None)
    }

    fn mask_of(&self, s: Src, exec: u32) -> u32 {
        let l = if exec == 0 {
            0
        } else {
            exec.trailing_zeros() as usize
        };
        self.v1(s, l) as u32
    }

    fn exec(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        op: &Op,
        pc: u32,
        group: u32,
        m: u32,
    ) -> R<Flow> {
        match *op {
            Op::Nop => {}
            Op::Mov { d, a } => {
                if m != 0 {
                    let v = self.v(a);
                    self.w(d, &v, m);
                }
            }
            Op::MovP { d, a } => {
                let v = self.pm(a);
                self.wp(d, v, m);
            }
            Op::Pack { d, a, n, bits } => {
                let mut o = [0u64; 32];
                let mk = ops::mask(bits);
                for (k, s) in a.iter().take(n as usize).enumerate() {
                    let v = self.v(*s);
                    for l in 0..32 {
                        o[l] |= (v[l] & mk) << (k as u32 * bits as u32);
                    }
                }
                self.w(d, &o, m);
            }
            Op::Unpack { d, n, bits, a } => {
                let v = self.v(a);
                let mk = ops::mask(bits);
                for (k, dst) in d.iter().take(n as usize).enumerate() {
                    if let Some(dst) = *dst {
                        let mut o = [0u64; 32];
                        for l in 0..32 {
                            o[l] = (v[l] >> (k as u32 * bits as u32)) & mk;
                        }
                        self.w(dst, &o, m);
                    }
                }
            }
            Op::Int2 { op, t, d, a, b } => {
                if m != 0 {
                    let mk = ops::mask(t.bits);
                    match op {
                        I2::Add => self.map2(d, a, b, m, |x, y| x.wrapping_add(y) & mk),
                        I2::Sub => self.map2(d, a, b, m, |x, y| x.wrapping_sub(y) & mk),
                        I2::MulLo => self.map2(d, a, b, m, |x, y| x.wrapping_mul(y) & mk),
                        I2::And => self.map2(d, a, b, m, |x, y| x & y & mk),
                        I2::Or => self.map2(d, a, b, m, |x, y| (x | y) & mk),
                        I2::Xor => self.map2(d, a, b, m, |x, y| (x ^ y) & mk),
                        I2::Shl => {
                            let bits = t.bits as u64;
                            self.map2(d, a, b, m, |x, y| {
                                if (y & 0xffff_ffff) >= bits {
                                    0
                                } else {
                                    (x << (y & 63)) & mk
                                }
                            })
                        }
                        _ => self.map2(d, a, b, m, |x, y| ops::int2(op, t, x, y)),
                    }
                }
            }
            Op::Int1 { op, t, d, a } => self.map1(d, a, m, |x| ops::int1(op, t, x)),
            Op::Int3 { op, t, d, a, b, c } => {
                if m != 0 {
                    match op {
                        I3::MadLo => {
                            let mk = ops::mask(t.bits);
                            self.map3(d, a, b, c, m, |x, y, z| {
                                x.wrapping_mul(y).wrapping_add(z) & mk
                            })
                        }
                        I3::MadWide if !t.signed && t.bits == 32 => {
                            self.map3(d, a, b, c, m, |x, y, z| {
                                (x & 0xffff_ffff)
                                    .wrapping_mul(y & 0xffff_ffff)
                                    .wrapping_add(z)
                            })
                        }
                        _ => self.map3(d, a, b, c, m, |x, y, z| ops::int3(op, t, x, y, z)),
                    }
                }
            }
            Op::Carry {
                kind,
                bits,
                cin,
                cout,
                d,
                a,
                b,
                c,
            } => {
                let mk = ops::mask(bits) as u128;
                for l in lanes(m) {
                    let cf = if cin { (self.cc >> l & 1) as u128 } else { 0 };
                    let (x, y, z) = (
                        self.v1(a, l) as u128 & mk,
                        self.v1(b, l) as u128 & mk,
                        self.v1(c, l) as u128 & mk,
                    );
                    let (v, carry) = match kind {
                        CarryKind::Add => {
                            let s = x + y + cf;
                            (s & mk, s > mk)
                        }
                        CarryKind::Sub => {
                            let borrow = y + cf > x;
                            (x.wrapping_sub(y + cf) & mk, borrow)
                        }
                        CarryKind::MadLo | CarryKind::MadHi => {
                            let p = x * y;
                            let p = if kind == CarryKind::MadLo {
                                p & mk
                            } else {
                                p >> bits
                            };
                            let s = p + z + cf;
                            (s & mk, s > mk)
                        }
                    };
                    self.regs[d as usize][l] = v as u64;
                    if cout {
                        self.cc = (self.cc & !(1 << l)) | ((carry as u32) << l);
                    }
                }
            }
            Op::Bfi { t, d, a, b, c, e } => {
                for l in lanes(m) {
                    let v = ops::bfi(
                        t,
                        self.v1(a, l),
                        self.v1(b, l),
                        self.v1(c, l),
                        self.v1(e, l),
                    );
                    self.regs[d as usize][l] = v;
                }
            }
            Op::MulWide { t, d, a, b } => {
                if !t.signed && t.bits == 32 {
                    self.map2(d, a, b, m, |x, y| (x & 0xffff_ffff) * (y & 0xffff_ffff));
                } else if t.signed && t.bits == 32 {
                    self.map2(d, a, b, m, |x, y| {
                        ((x as i32 as i64) * (y as i32 as i64)) as u64
                    });
                } else {
                    self.map2(d, a, b, m, |x, y| ops::mul_wide(t, x, y));
                }
            }
            Op::F2 {
                op,
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
            } => {
                if m != 0 {
                    let fast = f == FT::F32 && rnd == Rnd::N && !ftz && !sat;
                    let nan = |r: f32| {
                        if r.is_nan() {
                            float::NAN32 as u64
                        } else {
                            r.to_bits() as u64
                        }
                    };
                    let fl = |x: u64| f32::from_bits(x as u32);
                    match op {
                        F2::Add if fast => self.map2(d, a, b, m, |x, y| nan(fl(x) + fl(y))),
                        F2::Sub if fast => self.map2(d, a, b, m, |x, y| nan(fl(x) - fl(y))),
                        F2::Mul if fast => self.map2(d, a, b, m, |x, y| nan(fl(x) * fl(y))),
                        _ if f == FT::F64
                            && rnd == Rnd::N
                            && !ftz
                            && !sat
                            && matches!(op, F2::Add | F2::Sub | F2::Mul | F2::Div) =>
                        {
                            let g = |x: u64| f64::from_bits(x);
                            match op {
                                F2::Add => self.map2(d, a, b, m, |x, y| (g(x) + g(y)).to_bits()),
                                F2::Sub => self.map2(d, a, b, m, |x, y| (g(x) - g(y)).to_bits()),
                                F2::Mul => self.map2(d, a, b, m, |x, y| (g(x) * g(y)).to_bits()),
                                _ => self.map2(d, a, b, m, |x, y| (g(x) / g(y)).to_bits()),
                            }
                        }
                        _ => self.sparse3(d, a, b, Src::I(0), m, |x, y, _| {
                            ops::f2(op, f, rnd, ftz, sat, x, y)
                        }),
                    }
                }
            }
            Op::F1 {
                op,
                f,
                rnd,
                ftz,
                sat,
                approx: _,
                d,
                a,
            } => match op {
                F1::Neg | F1::Abs => self.map1(d, a, m, |x| ops::f1(op, f, rnd, ftz, sat, x)),
                _ => self.sparse3(d, a, Src::I(0), Src::I(0), m, |x, _, _| {
                    ops::f1(op, f, rnd, ftz, sat, x)
                }),
            },
            Op::Fma {
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
                c,
            } => {
                if m != 0 {
                    if f == FT::F32
                        && rnd == Rnd::N
                        && !ftz
                        && !sat
                        && crate::exec::fastfma::available()
                    {
                        let mut o = [0u64; 32];
                        crate::exec::fastfma::fma32(&self.v(a), &self.v(b), &self.v(c), &mut o);
                        self.w(d, &o, m);
                    } else if f == FT::F32 && rnd == Rnd::N && !ftz && !sat {
                        let fl = |x: u64| f32::from_bits(x as u32);
                        self.map3(d, a, b, c, m, |x, y, z| {
                            let r = fl(x).mul_add(fl(y), fl(z));
                            if r.is_nan() {
                                float::NAN32 as u64
                            } else {
                                r.to_bits() as u64
                            }
                        })
                    } else if f == FT::F64 && rnd == Rnd::N && !ftz && !sat {
                        let g = |x: u64| f64::from_bits(x);
                        self.map3(d, a, b, c, m, |x, y, z| g(x).mul_add(g(y), g(z)).to_bits())
                    } else {
                        self.sparse3(d, a, b, c, m, |x, y, z| ops::fma(f, rnd, ftz, sat, x, y, z))
                    }
                }
            }
            Op::F2x2 {
                op,
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
            } => self.sparse3(d, a, b, Src::I(0), m, |x, y, _| {
                ops::x2(x, y, 0, |p, q, _| ops::f2(op, f, rnd, ftz, sat, p, q))
            }),
            Op::Fmax2 {
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
                c,
            } => self.sparse3(d, a, b, c, m, |x, y, z| {
                ops::x2(x, y, z, |p, q, r| ops::fma(f, rnd, ftz, sat, p, q, r))
            }),
            Op::Cvt {
                dt,
                st,
                rnd,
                int_rnd,
                ftz,
                sat,
                d,
                a,
            } => {
                if m != 0 {
                    match (dt, st) {
                        // Integer widening/narrowing without saturation is the common case.
                        (Ty::I(di), Ty::I(si)) if !sat => {
                            let dm = ops::mask(di.bits);
                            if si.signed {
                                let sb = si.bits;
                                self.map1(d, a, m, |x| (ops::sext(x, sb) as u64) & dm)
                            } else {
                                let sm = ops::mask(si.bits);
                                self.map1(d, a, m, |x| x & sm & dm)
                            }
                        }
                        _ => self.sparse3(d, a, Src::I(0), Src::I(0), m, |x, _, _| {
                            ops::cvt(dt, st, rnd, int_rnd, ftz, sat, x)
                        }),
                    }
                }
            }
            Op::CvtPack { f, rnd, d, a, b } => self.sparse3(d, a, b, Src::I(0), m, |x, y, _| {
                let hi = ops::cvt(Ty::F(f), Ty::F(FT::F32), Some(rnd), false, false, false, x);
                let lo = ops::cvt(Ty::F(f), Ty::F(FT::F32), Some(rnd), false, false, false, y);
                (hi << 16) | (lo & 0xffff)
            }),
            Op::Setp {
                t,
                cmp,
                ftz,
                d,
                d2,
                a,
                b,
                comb,
            } => {
                let av = self.v(a);
                let bv = self.v(b);
                let mut bits = 0u32;
                match (t, cmp) {
                    (Ty::I(it), Cmp::Lt | Cmp::Ge | Cmp::Eq | Cmp::Ne | Cmp::Le | Cmp::Gt)
                        if it.bits == 32 || it.bits == 64 =>
                    {
                        let sh = 64 - it.bits as u32;
                        let key = |x: u64| -> i128 {
                            if it.signed {
                                (((x << sh) as i64) >> sh) as i128
                            } else {
                                ((x << sh) >> sh) as i128
                            }
                        };
                        for l in 0..32 {
                            let (x, y) = (key(av[l]), key(bv[l]));
                            let r = match cmp {
                                Cmp::Lt => x < y,
                                Cmp::Ge => x >= y,
                                Cmp::Eq => x == y,
                                Cmp::Ne => x != y,
                                Cmp::Le => x <= y,
                                _ => x > y,
                            };
                            bits |= (r as u32) << l;
                        }
                    }
                    _ => {
                        for l in lanes(m) {
                            bits |= (ops::compare(t, cmp, ftz, av[l], bv[l]) as u32) << l;
                        }
                    }
                }
                let (p, q) = match comb {
                    None => (bits, !bits),
                    Some((op, c)) => {
                        let c = self.pm(c);
                        let f = |x: u32| match op {
                            BoolOp::And => x & c,
                            BoolOp::Or => x | c,
                            BoolOp::Xor => x ^ c,
                        };
                        (f(bits), f(!bits))
                    }
                };
                if let Some(d) = d {
                    self.wp(d, p, m);
                }
                if let Some(d2) = d2 {
                    self.wp(d2, q, m);
                }
            }
            Op::Set {
                t,
                cmp,
                ftz,
                float_out,
                d,
                a,
                b,
                comb,
            } => {
                let c = comb.map(|(op, c)| (op, self.pm(c)));
                for l in lanes(m) {
                    let mut r = ops::compare(t, cmp, ftz, self.v1(a, l), self.v1(b, l));
                    if let Some((op, cm)) = c {
                        let cb = cm >> l & 1 != 0;
                        r = match op {
                            BoolOp::And => r && cb,
                            BoolOp::Or => r || cb,
                            BoolOp::Xor => r ^ cb,
                        };
                    }
                    self.regs[d as usize][l] = match (r, float_out) {
                        (true, true) => 1f32.to_bits() as u64,
                        (true, false) => 0xffff_ffff,
                        (false, _) => 0,
                    };
                }
            }
            Op::Selp { d, a, b, p } => {
                let pm = self.pm(p);
                let av = self.v(a);
                let bv = self.v(b);
                let mut o = [0u64; 32];
                for l in 0..32 {
                    o[l] = if pm >> l & 1 != 0 { av[l] } else { bv[l] };
                }
                self.w(d, &o, m);
            }
            Op::Slct { t, ftz, d, a, b, c } => {
                for l in lanes(m) {
                    let cv = self.v1(c, l);
                    let ge = match t {
                        Ty::F(f) => {
                            let cv = if ftz { float::ftz(f, cv) } else { cv };
                            float::to_f64(f, cv) >= 0.0
                        }
                        Ty::I(_) => (cv as u32 as i32) >= 0,
                    };
                    self.regs[d as usize][l] = if ge { self.v1(a, l) } else { self.v1(b, l) };
                }
            }
            Op::PBool { op, d, a, b } => {
                let (x, y) = (self.pm(a), self.pm(b));
                let r = match op {
                    BoolOp::And => x & y,
                    BoolOp::Or => x | y,
                    BoolOp::Xor => x ^ y,
                };
                self.wp(d, r, m);
            }
            Op::PNot { d, a } => {
                let x = self.pm(a);
                self.wp(d, !x, m);
            }
            Op::Testp { kind, f, d, a } => {
                let mut bits = 0;
                for l in lanes(m) {
                    bits |= (ops::testp(kind, f, self.v1(a, l)) as u32) << l;
                }
                self.wp(d, bits, m);
            }
            Op::Ld {
                sp: Space::Shared,
                size: 4,
                sign: false,
                n: 1,
                d: [Some(dr), ..],
                addr,
            } if self.ld_shared32(cta, dr, &addr, m) => {}
            Op::St {
                sp: Space::Shared,
                size: 4,
                n: 1,
                s: [s0, ..],
                addr,
            } if self.st_shared32(cta, s0, &addr, m) => {}
            Op::Ld {
                sp,
                size,
                sign,
                n,
                d,
                addr,
            } => self.ld(cx, cta, sp, size, sign, n, &d, &addr, m)?,
            Op::St {
                sp,
                size,
                n,
                s,
                addr,
            } => self.st(cx, cta, sp, size, n, &s, &addr, m)?,
            Op::Atom {
                sp,
                op,
                t,
                d,
                addr,
                b,
                c,
            } => self.atom(cx, cta, sp, op, t, d, &addr, b, c, m)?,
            Op::Bra { target } => return Ok(Flow::Branch(m, target)),
            Op::Call { target, ref args } => {
                if m != 0 {
                    for cp in args.iter() {
                        self.tparam_copy(cp, m)?;
                    }
                }
                return Ok(Flow::Call(m, target));
            }
            Op::CallRet { ref rets } => {
                for cp in rets.iter() {
                    self.tparam_copy(cp, m)?;
                }
            }
            Op::Ret => return Ok(Flow::Ret(m)),
            Op::Exit => return Ok(Flow::Exit(m)),
            Op::Trap => {
                if m != 0 {
                    return Err(trouble(m.trailing_zeros(), "trap instruction executed"));
                }
            }
            Op::Bar { id, count, red } => {
                if m == 0 {
                    return Ok(Flow::Next);
                }
                let l0 = m.trailing_zeros();
                let idv = self.v1(id, l0 as usize);
                if idv >= 16 {
                    return Err(trouble(
                        l0,
                        format!("barrier id {idv} is out of range (0..15)"),
                    ));
                }
                let cnt = match count {
                    Some(c) => {
                        let c = self.v1(c, l0 as usize);
                        if c == 0 || c % 32 != 0 || c > cx.nthreads.div_ceil(32) as u64 * 32 {
                            return Err(trouble(l0, format!("barrier thread count {c} must be a non-zero multiple of 32 no larger than the block")));
                        }
                        Some(c as u32)
                    }
                    None => None,
                };
                let pm = red.map(|(_, _, p, _)| self.pm(p)).unwrap_or(0);
                let b = &mut cta.bars;
                let i = idv as usize;
                if b.arrived[i] == 0 {
                    b.count[i] = cnt;
                    b.red[i] = red.map(|(op, ..)| op);
                    b.acc[i] = match red.map(|(op, ..)| op) {
                        Some(ReduxOp::And) => 1,
                        _ => 0,
                    };
                    b.line[i] = 0;
                } else if b.count[i] != cnt || b.red[i] != red.map(|(op, ..)| op) {
                    return Err(trouble(
                        l0,
                        format!(
                            "barrier {idv} used with different thread counts or reductions at once"
                        ),
                    ));
                }
                b.arrived[i] += m.count_ones();
                match red.map(|(op, ..)| op) {
                    Some(ReduxOp::Add) => b.acc[i] += (pm & m).count_ones(),
                    Some(ReduxOp::And) => b.acc[i] &= ((pm & m) == m) as u32,
                    Some(ReduxOp::Or) => b.acc[i] |= ((pm & m) != 0) as u32,
                    _ => {}
                }
                if let Some((_, d, _, popc)) = red {
                    for l in lanes(m) {
                        self.bar_dst[l] = Some((d, popc));
                    }
                }
                return Ok(Flow::Bar(m, idv as u8));
            }
            Op::BarWarp { mask } => {
                let mk = self.mask_of(mask, m);
                if let Some(f) = self.sync_check(mk, m, group, "bar.warp.sync")? {
                    return Ok(f);
                }
            }
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
                mask,
            } => {
                let mk = self.mask_of(mask, m);
                if let Some(f) = self.sync_check(mk, m, group, "shfl.sync")? {
                    return Ok(f);
                }
                let av = self.v(a);
                let mut o = [0u64; 32];
                let mut pv = 0u32;
                for l in lanes(m) {
                    let bv = (self.v1(b, l) & 0x1f) as i32;
                    let cv = self.v1(c, l) as u32;
                    let cval = (cv & 0x1f) as i32;
                    let seg = ((cv >> 8) & 0x1f) as i32;
                    let lane = l as i32;
                    let max_lane = (lane & seg) | (cval & !seg);
                    let min_lane = lane & seg;
                    let (j, ok) = match mode {
                        ShflMode::Up => (lane - bv, lane - bv >= max_lane),
                        ShflMode::Down => (lane + bv, lane + bv <= max_lane),
                        ShflMode::Bfly => (lane ^ bv, (lane ^ bv) <= max_lane),
                        ShflMode::Idx => {
                            let j = min_lane | (bv & !seg);
                            (j, j <= max_lane)
                        }
                    };
                    let src = if ok && (0..32).contains(&j) {
                        j as usize
                    } else {
                        l
                    };
                    o[l] = av[src] & 0xffff_ffff;
                    pv |= (ok as u32) << l;
                }
                self.w(d, &o, m);
                if let Some(p) = p {
                    self.wp(p, pv, m);
                }
            }
            Op::Vote { mode, d, p, mask } => {
                let mk = self.mask_of(mask, m);
                if let Some(f) = self.sync_check(mk, m, group, "vote.sync")? {
                    return Ok(f);
                }
                let pv = self.pm(p) & m;
                match mode {
                    VoteMode::Ballot => self.w(d, &[pv as u64; 32], m),
                    VoteMode::Any => self.wp(d, if pv != 0 { !0 } else { 0 }, m),
                    VoteMode::All => self.wp(d, if pv == m { !0 } else { 0 }, m),
                    VoteMode::Uni => self.wp(d, if pv == m || pv == 0 { !0 } else { 0 }, m),
                }
            }
            Op::Activemask { d } => self.w(d, &[m as u64; 32], m),
            Op::Redux {
                op,
                signed,
                d,
                a,
                mask,
            } => {
                let mk = self.mask_of(mask, m);
                if let Some(f) = self.sync_check(mk, m, group, "redux.sync")? {
                    return Ok(f);
                }
                let av = self.v(a);
                let mut acc: Option<u32> = None;
                for l in lanes(m) {
                    let x = av[l] as u32;
                    acc = Some(match acc {
                        None => x,
                        Some(y) => match op {
                            ReduxOp::Add => y.wrapping_add(x),
                            ReduxOp::And => y & x,
                            ReduxOp::Or => y | x,
                            ReduxOp::Xor => y ^ x,
                            ReduxOp::Min if signed => (y as i32).min(x as i32) as u32,
                            ReduxOp::Max if signed => (y as i32).max(x as i32) as u32,
                            ReduxOp::Min => y.min(x),
                            ReduxOp::Max => y.max(x),
                        },
                    });
                }
                self.w(d, &[acc.unwrap_or(0) as u64; 32], m);
            }
            Op::Match {
                all,
                bits,
                d,
                p,
                a,
                mask,
            } => {
                let mk = self.mask_of(mask, m);
                if let Some(f) = self.sync_check(mk, m, group, "match.sync")? {
                    return Ok(f);
                }
                let av = self.v(a);
                let vm = ops::mask(bits);
                let mut o = [0u64; 32];
                let mut pv = 0u32;
                for l in lanes(m) {
                    let same = lanes(m)
                        .filter(|&k| av[k] & vm == av[l] & vm)
                        .fold(0u32, |acc, k| acc | 1 << k);
                    if all {
                        let eq = same == m;
                        o[l] = if eq { m as u64 } else { 0 };
                        pv |= (eq as u32) << l;
                    } else {
                        o[l] = same as u64;
                    }
                }
                self.w(d, &o, m);
                if let Some(p) = p {
                    self.wp(p, pv, m);
                }
            }
            Op::Vprintf { ret, fmt, args } => {
                for l in lanes(m) {
                    let n = crate::exec::printf::vprintf(self, cx, cta, l, fmt, args)?;
                    if let Some(r) = ret {
                        self.tparam_write(l, r, 4, n as u64)
                            .map_err(|e| trouble(l as u32, e))?;
                    }
                }
            }
            Op::AssertFail { args } => {
                if m != 0 {
                    let l = m.trailing_zeros() as usize;
                    let msg = crate::exec::printf::assert_message(self, cx, cta, l, args);
                    return Err(trouble(l as u32, msg));
                }
            }
            Op::Clock { d, bits } => {
                let t = crate::exec::clock_ticks();
                let v = if bits == 32 { t & 0xffff_ffff } else { t };
                self.w(d, &[v; 32], m);
            }
        }
        let _ = pc;
        Ok(Flow::Next)
    }

    /// The common 4-byte shared load. Returns false (having done nothing) if any lane's access
    /// is misaligned or out of range, so the general path can report it.
    #[inline(always)]
    fn ld_shared32(&mut self, cta: &CtaCtx<'_>, d: u32, addr: &Addr, m: u32) -> bool {
        let sh: &[u8] = cta.shared;
        let mut o = [0u64; 32];
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a & 3 != 0 {
                return false;
            }
            match sh.get(a as usize..).and_then(|s| s.get(..4)) {
                Some(b) => o[l] = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
                None => return false,
            }
        }
        self.w(d, &o, m);
        true
    }

    #[inline(always)]
    fn st_shared32(&mut self, cta: &mut CtaCtx<'_>, s: Src, addr: &Addr, m: u32) -> bool {
        let len = cta.shared.len() as u64;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a & 3 != 0 || a >= len || len - a < 4 {
                return false;
            }
        }
        for l in lanes(m) {
            let a = self.addr(addr, l) as usize;
            let v = self.v1(s, l) as u32;
            if let Some(b) = cta.shared.get_mut(a..a + 4) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        true
    }

    fn tparam_copy(&mut self, cp: &Copy3, m: u32) -> R<()> {
        let sz = self.tparam_size;
        let from = (cp.from as u64).wrapping_sub(TPARAM_FLAG) as usize;
        let to = (cp.to as u64).wrapping_sub(TPARAM_FLAG) as usize;
        let len = cp.len as usize;
        if from + len > sz || to + len > sz {
            return Err(trouble(
                m.trailing_zeros(),
                "call parameter outside the parameter area",
            ));
        }
        for l in lanes(m) {
            let base = l * sz;
            self.tparam
                .copy_within(base + from..base + from + len, base + to);
        }
        Ok(())
    }

    pub(crate) fn tparam_write(
        &mut self,
        l: usize,
        at: u32,
        size: usize,
        v: u64,
    ) -> Result<(), String> {
        let off = (at as u64).wrapping_sub(TPARAM_FLAG) as usize;
        if off + size > self.tparam_size {
            return Err("parameter write out of range".into());
        }
        let base = l * self.tparam_size + off;
        if let Some(dst) = self.tparam.get_mut(base..base + size) {
            dst.copy_from_slice(&v.to_le_bytes()[..size]);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    fn ld(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        size: u8,
        sign: bool,
        n: u8,
        d: &[Option<u32>; 4],
        addr: &Addr,
        m: u32,
    ) -> R<()> {
        let total = size as u32 * n as u32;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a % total as u64 != 0 {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {total}-byte load from {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, total, l, false)
                .map_err(|e| trouble(l as u32, e))?;
            for k in 0..n as usize {
                let v = self.load(cx, cta, loc, k as u64 * size as u64, size as u32);
                let v = if sign {
                    ops::sext(v, size * 8) as u64
                } else {
                    v
                };
                if let Some(r) = d[k] {
                    self.regs[r as usize][l] = v;
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    fn st(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        size: u8,
        n: u8,
        s: &[Src; 4],
        addr: &Addr,
        m: u32,
    ) -> R<()> {
        let total = size as u32 * n as u32;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a % total as u64 != 0 {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {total}-byte store to {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, total, l, true)
                .map_err(|e| trouble(l as u32, e))?;
            for k in 0..n as usize {
                let v = self.v1(s[k], l);
                self.store(cta, loc, k as u64 * size as u64, size as u32, v);
            }
        }
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn load(
        &self,
        cx: &Launch<'_>,
        cta: &CtaCtx<'_>,
        loc: Loc<'_>,
        k: u64,
        size: u32,
    ) -> u64 {
        match loc {
            Loc::Atomic(r, off) => r.load(off + k, size),
            Loc::Shared(o) => le_read(cta.shared, o + k as usize, size),
            Loc::Local(o) => le_read(&self.local, o + k as usize, size),
            Loc::TParam(o) => le_read(&self.tparam, o + k as usize, size),
            Loc::Args(o) => le_read(cx.args, o + k as usize, size),
        }
    }

    #[inline(always)]
    fn store(&mut self, cta: &mut CtaCtx<'_>, loc: Loc<'_>, k: u64, size: u32, v: u64) {
        match loc {
            Loc::Atomic(r, off) => r.store(off + k, size, v),
            Loc::Shared(o) => le_write(cta.shared, o + k as usize, size, v),
            Loc::Local(o) => le_write(&mut self.local, o + k as usize, size, v),
            Loc::TParam(o) => le_write(&mut self.tparam, o + k as usize, size, v),
            // Rejected by `locate` for writes.
            Loc::Args(_) => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atom(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        op: AtomOp,
        t: AtomTy,
        d: Option<u32>,
        addr: &Addr,
        b: Src,
        c: Src,
        m: u32,
    ) -> R<()> {
        let size = match t {
            AtomTy::U64 | AtomTy::S64 | AtomTy::B64 | AtomTy::F64 => 8,
            AtomTy::F16 | AtomTy::BF16 => 2,
            _ => 4,
        };
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a % size as u64 != 0 {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {size}-byte atomic at {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, size, l, true)
                .map_err(|e| trouble(l as u32, e))?;
            let (bv, cv) = (self.v1(b, l), self.v1(c, l));
            let old = match loc {
                Loc::Atomic(r, off) => crate::exec::mem::atomic_global(r, off, size, op, t, bv, cv),
                Loc::Shared(_) | Loc::Local(_) => {
                    let old = self.load(cx, cta, loc, 0, size);
                    let new = crate::exec::mem::atom_apply(op, t, old, bv, cv);
                    self.store(cta, loc, 0, size, new);
                    old
                }
                _ => return Err(trouble(l as u32, "atomic on a parameter address")),
            };
            if let Some(d) = d {
                self.regs[d as usize][l] = old;
            }
        }
        Ok(())
    }
}

pub(crate) fn show_addr(sp: Space, a: u64) -> String {
    match sp {
        Space::Generic | Space::Global | Space::Const => format!("address {a:#x}"),
        Space::Shared => format!("shared offset {a:#x}"),
        Space::Local => format!("local offset {a:#x}"),
        Space::Param => format!("param offset {a:#x}"),
    }
}

#[inline(always)]
fn le_read(buf: &[u8], o: usize, size: u32) -> u64 {
    match buf.get(o..o + size as usize) {
        Some(b) => {
            let mut w = [0u8; 8];
            w[..size as usize].copy_from_slice(b);
            u64::from_le_bytes(w)
        }
        None => 0,
    }
}

#[inline(always)]
fn le_write(buf: &mut [u8], o: usize, size: u32, v: u64) {
    if let Some(b) = buf.get_mut(o..o + size as usize) {
        b.copy_from_slice(&v.to_le_bytes()[..size as usize]);
    }
}
