//! Moves and conversions: `mov` (scalar, predicate, vector pack/unpack, `%clock`) and `cvt`.

// Each handler takes its instruction's decoded fields as arguments, so that `Warp::exec` stays one
// flat match over `Op` that the compiler can inline these into.
#![allow(clippy::too_many_arguments)]

use crate::exec::ops;
use crate::exec::warp::Warp;
use crate::exec::Launch;
use crate::ir::*;

impl Warp {
    #[inline]
    pub(super) fn mov(&mut self, d: u32, a: Src, m: u32) {
        if m != 0 {
            let v = self.v(a);
            self.w(d, &v, m);
        }
    }

    #[inline]
    pub(super) fn mov_pred(&mut self, d: u32, a: PSrc, m: u32) {
        let v = self.pm(a);
        self.wp(d, v, m);
    }

    #[inline]
    pub(super) fn pack(&mut self, d: u32, a: [Src; 4], n: u8, bits: u8, m: u32) {
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

    #[inline]
    pub(super) fn unpack(&mut self, d: [Option<u32>; 4], n: u8, bits: u8, a: Src, m: u32) {
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

    #[inline]
    pub(super) fn cvt(
        &mut self,
        dt: Ty,
        st: Ty,
        rnd: Option<Rnd>,
        int_rnd: bool,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        m: u32,
    ) {
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

    #[inline]
    pub(super) fn cvt_pack(&mut self, f: FT, rnd: Rnd, d: u32, a: Src, b: Src, m: u32) {
        self.sparse3(d, a, b, Src::I(0), m, |x, y, _| {
            let hi = ops::cvt(Ty::F(f), Ty::F(FT::F32), Some(rnd), false, false, false, x);
            let lo = ops::cvt(Ty::F(f), Ty::F(FT::F32), Some(rnd), false, false, false, y);
            (hi << 16) | (lo & 0xffff)
        })
    }

    /// `%envregN`: what the launch set it to (0 unless it says otherwise).
    #[inline]
    pub(super) fn envreg(&mut self, cx: &Launch<'_>, d: u32, n: u8, m: u32) {
        let v = cx.envreg.get(usize::from(n)).copied().unwrap_or(0);
        self.w(d, &[u64::from(v); 32], m);
    }

    #[inline]
    pub(super) fn clock(&mut self, d: u32, bits: u8, m: u32) {
        let t = clock_ticks();
        let v = if bits == 32 { t & 0xffff_ffff } else { t };
        self.w(d, &[v; 32], m);
    }
}

/// `%clock`/`%clock64`: nanoseconds since the first read in this process, so that differences
/// between two reads measure elapsed time as on a GPU.
fn clock_ticks() -> u64 {
    static CLOCK_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    CLOCK_START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}
