//! Comparisons, selection and predicate logic: `setp`, `set`, `selp`, `slct`, `testp`, and
//! `and`/`or`/`xor`/`not` on predicates.

// Each handler takes its instruction's decoded fields as arguments, so that `Warp::exec` stays one
// flat match over `Op` that the compiler can inline these into.
#![allow(clippy::too_many_arguments)]

use crate::exec::ops;
use crate::exec::regs::lanes;
use crate::exec::warp::Warp;
use crate::float;
use crate::ir::*;

impl Warp {
    #[inline]
    pub(super) fn setp(
        &mut self,
        t: Ty,
        cmp: Cmp,
        ftz: bool,
        d: Option<u32>,
        d2: Option<u32>,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, PSrc)>,
        m: u32,
    ) {
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
                (ops::bool_op(op, bits, c), ops::bool_op(op, !bits, c))
            }
        };
        if let Some(d) = d {
            self.wp(d, p, m);
        }
        if let Some(d2) = d2 {
            self.wp(d2, q, m);
        }
    }

    #[inline]
    pub(super) fn set(
        &mut self,
        t: Ty,
        cmp: Cmp,
        ftz: bool,
        float_out: bool,
        d: u32,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, PSrc)>,
        m: u32,
    ) {
        let c = comb.map(|(op, c)| (op, self.pm(c)));
        for l in lanes(m) {
            let mut r = ops::compare(t, cmp, ftz, self.v1(a, l), self.v1(b, l));
            if let Some((op, cm)) = c {
                r = ops::bool_op(op, r as u32, cm >> l & 1) != 0;
            }
            self.regs[d as usize][l] = match (r, float_out) {
                (true, true) => 1f32.to_bits() as u64,
                (true, false) => 0xffff_ffff,
                (false, _) => 0,
            };
        }
    }

    #[inline]
    pub(super) fn selp(&mut self, d: u32, a: Src, b: Src, p: PSrc, m: u32) {
        let pm = self.pm(p);
        let av = self.v(a);
        let bv = self.v(b);
        let mut o = [0u64; 32];
        for l in 0..32 {
            o[l] = if pm >> l & 1 != 0 { av[l] } else { bv[l] };
        }
        self.w(d, &o, m);
    }

    #[inline]
    pub(super) fn slct(&mut self, t: Ty, ftz: bool, d: u32, a: Src, b: Src, c: Src, m: u32) {
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

    #[inline]
    pub(super) fn pred_bool(&mut self, op: BoolOp, d: u32, a: PSrc, b: PSrc, m: u32) {
        let r = ops::bool_op(op, self.pm(a), self.pm(b));
        self.wp(d, r, m);
    }

    #[inline]
    pub(super) fn pred_not(&mut self, d: u32, a: PSrc, m: u32) {
        let x = self.pm(a);
        self.wp(d, !x, m);
    }

    #[inline]
    pub(super) fn testp(&mut self, kind: TestpKind, f: FT, d: u32, a: Src, m: u32) {
        let mut bits = 0;
        for l in lanes(m) {
            bits |= (ops::testp(kind, f, self.v1(a, l)) as u32) << l;
        }
        self.wp(d, bits, m);
    }
}
