//! Synchronisation: CTA barriers (`bar.sync`, `bar.red`: a warp's arrival, and its release once
//! the CTA scheduler sees every expected thread in) and the warp-synchronous ops
//! (`bar.warp.sync`, `shfl`, `vote`, `activemask`, `redux`, `match`) with the membership rules
//! they share.

// Each handler takes its instruction's decoded fields as arguments, so that `Warp::exec` stays one
// flat match over `Op` that the compiler can inline these into.
#![allow(clippy::too_many_arguments)]

use crate::exec::ops;
use crate::exec::regs::lanes;
use crate::exec::warp::{trouble, Flow, Warp, R};
use crate::exec::{CtaCtx, Launch};
use crate::ir::*;

impl Warp {
    /// Wakes this warp's lanes waiting at barrier `id`, giving those of a `bar.red` the
    /// reduction `acc`.
    #[inline]
    pub(super) fn release_barrier(&mut self, id: usize, acc: u32) {
        for l in lanes(self.bar_wait) {
            if self.bar_id[l] as usize != id {
                continue;
            }
            self.bar_wait &= !(1 << l);
            if let Some((d, is_int)) = self.bar_dst[l].take() {
                if is_int {
                    if let Some(r) = self.regs.get_mut(d as usize) {
                        r[l] = acc as u64;
                    }
                } else if let Some(p) = self.preds.get_mut(d as usize) {
                    *p = (*p & !(1 << l)) | (((acc != 0) as u32) << l);
                }
            }
        }
        self.try_converge();
    }

    #[inline]
    pub(super) fn bar(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        id: Src,
        count: Option<Src>,
        red: Option<(ReduxOp, u32, PSrc, bool)>,
        m: u32,
    ) -> R<Flow> {
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
                if c == 0 || !c.is_multiple_of(32) || c > cx.nthreads.div_ceil(32) as u64 * 32 {
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
                format!("barrier {idv} used with different thread counts or reductions at once"),
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
        Ok(Flow::Bar(m, idv as u8))
    }

    #[inline]
    pub(super) fn bar_warp(&mut self, mask: Src, m: u32, group: u32) -> R<Flow> {
        let mk = self.mask_of(mask, m);
        if let Some(f) = self.sync_check(mk, m, group, "bar.warp.sync")? {
            return Ok(f);
        }
        Ok(Flow::Next)
    }

    #[inline]
    pub(super) fn shfl(
        &mut self,
        mode: ShflMode,
        d: u32,
        p: Option<u32>,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
        m: u32,
        group: u32,
    ) -> R<Flow> {
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
        Ok(Flow::Next)
    }

    #[inline]
    pub(super) fn vote(
        &mut self,
        mode: VoteMode,
        d: u32,
        p: PSrc,
        mask: Src,
        m: u32,
        group: u32,
    ) -> R<Flow> {
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
        Ok(Flow::Next)
    }

    #[inline]
    pub(super) fn activemask(&mut self, d: u32, m: u32) {
        self.w(d, &[m as u64; 32], m)
    }

    #[inline]
    pub(super) fn redux(
        &mut self,
        op: ReduxOp,
        signed: bool,
        d: u32,
        a: Src,
        mask: Src,
        m: u32,
        group: u32,
    ) -> R<Flow> {
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
        Ok(Flow::Next)
    }

    #[inline]
    pub(super) fn match_(
        &mut self,
        all: bool,
        bits: u8,
        d: u32,
        p: Option<u32>,
        a: Src,
        mask: Src,
        m: u32,
        group: u32,
    ) -> R<Flow> {
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
        Ok(Flow::Next)
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
}
