//! Lane-wise access to a warp's registers: reading an operand for one lane or all 32, writing
//! a result to the lanes of an execution mask, and the whole-warp loops (`map*`) the common
//! instructions run as.

use crate::exec::warp::Warp;
use crate::ir::*;

/// The lanes set in `mask`, lowest first.
#[inline(always)]
pub(crate) fn lanes(mask: u32) -> impl Iterator<Item = usize> {
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
    #[inline(always)]
    pub(super) fn v(&self, s: Src) -> [u64; 32] {
        match s {
            Src::R(r) => self.regs[r as usize],
            Src::I(x) => [x; 32],
        }
    }

    #[inline(always)]
    pub(super) fn v1(&self, s: Src, l: usize) -> u64 {
        match s {
            Src::R(r) => self.regs[r as usize][l],
            Src::I(x) => x,
        }
    }

    #[inline(always)]
    pub(super) fn pm(&self, p: PSrc) -> u32 {
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
    pub(super) fn w(&mut self, d: u32, v: &[u64; 32], mask: u32) {
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
    pub(super) fn wp(&mut self, d: u32, bits: u32, mask: u32) {
        let p = &mut self.preds[d as usize];
        *p = (*p & !mask) | (bits & mask);
    }

    #[inline(always)]
    pub(super) fn map1(&mut self, d: u32, a: Src, mask: u32, f: impl Fn(u64) -> u64) {
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
    pub(super) fn map2(&mut self, d: u32, a: Src, b: Src, mask: u32, f: impl Fn(u64, u64) -> u64) {
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
    pub(super) fn map3(
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
    pub(super) fn sparse3(
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
}
