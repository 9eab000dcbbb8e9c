//! One warp: 32 lanes with their registers, per-lane program counters and per-thread memory.
//!
//! Scheduling follows independent thread scheduling in its simplest faithful form: the lanes at
//! the lowest program counter run together, so divergent paths serialise and reconverge as soon
//! as they reach the same instruction. While all live lanes share one pc (the common case) the
//! warp stays in a "converged" mode that keeps a single pc and skips the per-lane bookkeeping.

use std::sync::atomic::{fence, Ordering};

use crate::exec::regs::lanes;
use crate::exec::{Budget, CtaCtx, Launch};
use crate::ir::*;

/// Why an instruction stopped a lane: which lane, and what to tell the user.
pub(crate) struct Trouble {
    pub lane: u32,
    pub msg: String,
}

pub(crate) type R<T> = Result<T, Trouble>;

pub(crate) fn trouble(lane: u32, msg: impl Into<String>) -> Trouble {
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

/// A warp's state. Lane masks (`live`, `bar_wait`, ...) have bit `l` for lane `l`.
pub(crate) struct Warp {
    /// Every register of the program, 32 lanes each; the first slots are the special registers.
    pub regs: Vec<[u64; 32]>,
    /// Every predicate register, as a lane mask.
    pub preds: Vec<u32>,
    /// Per-lane pcs; meaningful only while the warp is not `converged`.
    pub pc: [u32; 32],
    /// Lanes that exist and have not exited.
    pub live: u32,
    /// Lanes waiting at a CTA barrier (`bar_id` says which).
    pub bar_wait: u32,
    /// Lanes waiting for the rest of a warp-synchronous op's member mask.
    pub sync_wait: u32,
    /// All live lanes are at `cpc`.
    pub converged: bool,
    pub cpc: u32,
    pub bar_id: [u8; 32],
    /// Per-lane carry flag (CC.CF) of the carry-chain instructions.
    pub cc: u32,
    /// For `bar.red`: where each waiting lane gets the reduction (register, is-integer).
    pub bar_dst: [Option<(u32, bool)>; 32],
    /// Per-lane return addresses of the calls in progress.
    pub stacks: Vec<Vec<u32>>,
    /// Per-thread `.local` memory, `local_size` bytes per lane.
    pub local: Vec<u8>,
    pub local_size: usize,
    /// Per-thread `.param` area for call arguments and results, `tparam_size` bytes per lane.
    pub tparam: Vec<u8>,
    pub tparam_size: usize,
    /// The global allocation this warp hit last, where the next lookup starts.
    pub hint: usize,
    /// Which warp of its CTA this is.
    pub index: u32,
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
            let tid = self.tid_of(cx, l);
            // In the order of `SPECIAL_REGS`, whose names occupy the first register slots.
            let vals: [u64; SPECIAL_REGS.len()] = [
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

    pub(crate) fn pc_of(&self, l: u32) -> u32 {
        if self.converged {
            self.cpc
        } else {
            self.pc[l as usize & 31]
        }
    }

    pub(crate) fn tid_of(&self, cx: &Launch<'_>, lane: u32) -> [u32; 3] {
        let lin = self.index * 32 + lane;
        let [bx, by, _] = cx.block;
        [lin % bx, (lin / bx) % by, lin / (bx * by)]
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
            match self.exec(cx, cta, &inst.op, group, exec) {
                Ok(flow) => self.apply(pc, group, flow),
                Err(t) => {
                    return Err(cx.fault(inst.line, cta.ctaid, self.tid_of(cx, t.lane), t.msg))
                }
            }
        }
        Ok(())
    }

    /// Executes one instruction for the lanes in `m` (those of `group` whose guard holds) and
    /// says where the group goes next. The semantics of each instruction family live in its own
    /// file: `data`, `arith`, `compare`, `mem`, `atomic`, `control`, `sync`.
    fn exec(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        op: &Op,
        group: u32,
        m: u32,
    ) -> R<Flow> {
        match *op {
            Op::Nop => {}
            Op::Mov { d, a } => self.mov(d, a, m),
            Op::MovP { d, a } => self.mov_pred(d, a, m),
            Op::Pack { d, a, n, bits } => self.pack(d, a, n, bits, m),
            Op::Unpack { d, n, bits, a } => self.unpack(d, n, bits, a, m),
            Op::Cvt {
                dt,
                st,
                rnd,
                int_rnd,
                ftz,
                sat,
                d,
                a,
            } => self.cvt(dt, st, rnd, int_rnd, ftz, sat, d, a, m),
            Op::CvtPack { f, rnd, d, a, b } => self.cvt_pack(f, rnd, d, a, b, m),
            Op::Clock { d, bits } => self.clock(d, bits, m),
            Op::EnvReg { d, n } => self.envreg(cx, d, n, m),
            Op::Int2 { op, t, d, a, b } => self.int2(op, t, d, a, b, m),
            Op::Int1 { op, t, d, a } => self.int1(op, t, d, a, m),
            Op::Int3 { op, t, d, a, b, c } => self.int3(op, t, d, a, b, c, m),
            Op::Carry {
                kind,
                bits,
                cin,
                cout,
                d,
                a,
                b,
                c,
            } => self.carry(kind, bits, cin, cout, d, a, b, c, m),
            Op::Bfi { t, d, a, b, c, e } => self.bfi(t, d, a, b, c, e, m),
            Op::MulWide { t, d, a, b } => self.mul_wide(t, d, a, b, m),
            Op::F2 {
                op,
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
            } => self.f2(op, f, rnd, ftz, sat, d, a, b, m),
            Op::F1 {
                op,
                f,
                rnd,
                ftz,
                sat,
                approx: _,
                d,
                a,
            } => self.f1(op, f, rnd, ftz, sat, d, a, m),
            Op::Fma {
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
                c,
            } => self.fma(f, rnd, ftz, sat, d, a, b, c, m),
            Op::F2x2 {
                op,
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
            } => self.f2_x2(op, f, rnd, ftz, sat, d, a, b, m),
            Op::Fmax2 {
                f,
                rnd,
                ftz,
                sat,
                d,
                a,
                b,
                c,
            } => self.fma_x2(f, rnd, ftz, sat, d, a, b, c, m),
            Op::Setp {
                t,
                cmp,
                ftz,
                d,
                d2,
                a,
                b,
                comb,
            } => self.setp(t, cmp, ftz, d, d2, a, b, comb, m),
            Op::Set {
                t,
                cmp,
                ftz,
                float_out,
                d,
                a,
                b,
                comb,
            } => self.set(t, cmp, ftz, float_out, d, a, b, comb, m),
            Op::Selp { d, a, b, p } => self.selp(d, a, b, p, m),
            Op::Slct { t, ftz, d, a, b, c } => self.slct(t, ftz, d, a, b, c, m),
            Op::PBool { op, d, a, b } => self.pred_bool(op, d, a, b, m),
            Op::PNot { d, a } => self.pred_not(d, a, m),
            Op::Testp { kind, f, d, a } => self.testp(kind, f, d, a, m),
            // Shared memory is only ever touched by the CTA's own OS thread: no order to keep.
            Op::Ld {
                sp: Space::Shared,
                size: 4,
                sign: false,
                n: 1,
                d: [Some(dr), ..],
                addr,
                ..
            } if self.ld_shared32(cta, dr, &addr, m) => {}
            Op::St {
                sp: Space::Shared,
                size: 4,
                n: 1,
                s: [s0, ..],
                addr,
                ..
            } if self.st_shared32(cta, s0, &addr, m) => {}
            Op::Ld {
                sp,
                size,
                sign,
                n,
                d,
                addr,
                acquire,
            } => {
                self.ld(cx, cta, sp, size, sign, n, &d, &addr, m)?;
                if acquire {
                    // A relaxed load then an acquire fence: at least an acquire load.
                    fence(Ordering::Acquire);
                }
            }
            Op::St {
                sp,
                size,
                n,
                s,
                addr,
                release,
            } => {
                if release {
                    // A release fence then a relaxed store: at least a release store.
                    fence(Ordering::Release);
                }
                self.st(cx, cta, sp, size, n, &s, &addr, m)?
            }
            Op::Fence => fence(Ordering::SeqCst),
            Op::Nanosleep { t } => self.nanosleep(t, m),
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
            Op::Call { target, ref args } => return self.call(target, args, m),
            Op::CallRet { ref rets } => self.call_ret(rets, m)?,
            Op::Ret => return Ok(Flow::Ret(m)),
            Op::Exit => return Ok(Flow::Exit(m)),
            Op::Trap => self.trap(m)?,
            Op::Vprintf { ret, fmt, args } => self.vprintf(cx, cta, ret, fmt, args, m)?,
            Op::AssertFail { args } => self.assert_fail(cx, cta, args, m)?,
            Op::Bar { id, count, red } => return self.bar(cx, cta, id, count, red, m),
            Op::BarWarp { mask } => return self.bar_warp(mask, m, group),
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
                mask,
            } => return self.shfl(mode, d, p, a, b, c, mask, m, group),
            Op::Vote { mode, d, p, mask } => return self.vote(mode, d, p, mask, m, group),
            Op::Activemask { d } => self.activemask(d, m),
            Op::Redux {
                op,
                signed,
                d,
                a,
                mask,
            } => return self.redux(op, signed, d, a, mask, m, group),
            Op::Match {
                all,
                bits,
                d,
                p,
                a,
                mask,
            } => return self.match_(all, bits, d, p, a, mask, m, group),
        }
        Ok(Flow::Next)
    }
}
