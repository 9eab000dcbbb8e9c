//! Integer, carry-chain and floating-point arithmetic, scalar and packed-half. The common cases
//! (f32/f64 round-to-nearest, plain integer ops) run whole-warp loops; the rest go lane by lane
//! through the bit-exact semantics of `ops`.

// Each handler takes its instruction's decoded fields as arguments, so that `Warp::exec` stays one
// flat match over `Op` that the compiler can inline these into.
#![allow(clippy::too_many_arguments)]

use crate::exec::regs::lanes;
use crate::exec::warp::Warp;
use crate::exec::{fastfma, ops};
use crate::float;
use crate::ir::*;

impl Warp {
    #[inline]
    pub(super) fn int2(&mut self, op: I2, t: IT, d: u32, a: Src, b: Src, m: u32) {
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

    #[inline]
    pub(super) fn int1(&mut self, op: I1, t: IT, d: u32, a: Src, m: u32) {
        self.map1(d, a, m, |x| ops::int1(op, t, x))
    }

    #[inline]
    pub(super) fn int3(&mut self, op: I3, t: IT, d: u32, a: Src, b: Src, c: Src, m: u32) {
        if m != 0 {
            match op {
                I3::MadLo => {
                    let mk = ops::mask(t.bits);
                    self.map3(d, a, b, c, m, |x, y, z| {
                        x.wrapping_mul(y).wrapping_add(z) & mk
                    })
                }
                I3::MadWide if !t.signed && t.bits == 32 => self.map3(d, a, b, c, m, |x, y, z| {
                    (x & 0xffff_ffff)
                        .wrapping_mul(y & 0xffff_ffff)
                        .wrapping_add(z)
                }),
                _ => self.map3(d, a, b, c, m, |x, y, z| ops::int3(op, t, x, y, z)),
            }
        }
    }

    #[inline]
    pub(super) fn carry(
        &mut self,
        kind: CarryKind,
        bits: u8,
        cin: bool,
        cout: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        m: u32,
    ) {
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

    #[inline]
    pub(super) fn bfi(&mut self, t: IT, d: u32, a: Src, b: Src, c: Src, e: Src, m: u32) {
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

    #[inline]
    pub(super) fn mul_wide(&mut self, t: IT, d: u32, a: Src, b: Src, m: u32) {
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

    #[inline]
    pub(super) fn f2(
        &mut self,
        op: F2,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        m: u32,
    ) {
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

    #[inline]
    pub(super) fn f1(
        &mut self,
        op: F1,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        m: u32,
    ) {
        match op {
            F1::Neg | F1::Abs => self.map1(d, a, m, |x| ops::f1(op, f, rnd, ftz, sat, x)),
            _ => self.sparse3(d, a, Src::I(0), Src::I(0), m, |x, _, _| {
                ops::f1(op, f, rnd, ftz, sat, x)
            }),
        }
    }

    #[inline]
    pub(super) fn fma(
        &mut self,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        m: u32,
    ) {
        if m != 0 {
            if f == FT::F32 && rnd == Rnd::N && !ftz && !sat && fastfma::available() {
                let mut o = [0u64; 32];
                fastfma::fma32(&self.v(a), &self.v(b), &self.v(c), &mut o);
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

    #[inline]
    pub(super) fn f2_x2(
        &mut self,
        op: F2,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        m: u32,
    ) {
        self.sparse3(d, a, b, Src::I(0), m, |x, y, _| {
            ops::x2(x, y, 0, |p, q, _| ops::f2(op, f, rnd, ftz, sat, p, q))
        })
    }

    #[inline]
    pub(super) fn fma_x2(
        &mut self,
        f: FT,
        rnd: Rnd,
        ftz: bool,
        sat: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        m: u32,
    ) {
        self.sparse3(d, a, b, c, m, |x, y, z| {
            ops::x2(x, y, z, |p, q, r| ops::fma(f, rnd, ftz, sat, p, q, r))
        })
    }
}
