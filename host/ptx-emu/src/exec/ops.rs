//! Per-lane semantics of the arithmetic, conversion and comparison instructions, as pure
//! functions on register bits. Registers hold values in their low bits; every function reads
//! only the width it needs, so whatever lies above is ignored.

use crate::float::{self, to_f64};
use crate::ir::*;

#[inline(always)]
pub(crate) fn mask(bits: u8) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[inline(always)]
pub(crate) fn sext(x: u64, bits: u8) -> i64 {
    let s = 64 - bits.min(64) as u32;
    ((x << s) as i64) >> s
}

#[inline(always)]
fn ival(x: u64, t: IT) -> i128 {
    if t.signed {
        sext(x, t.bits) as i128
    } else {
        (x & mask(t.bits)) as i128
    }
}

/// The full product as 128-bit two's complement; bits [b, 2b) are the high half for either
/// signedness.
#[inline(always)]
fn wide_mul(t: IT, x: u64, y: u64) -> u128 {
    if t.signed {
        ((sext(x, t.bits) as i128) * (sext(y, t.bits) as i128)) as u128
    } else {
        ((x & mask(t.bits)) as u128) * ((y & mask(t.bits)) as u128)
    }
}

/// `and`/`or`/`xor` on predicate bits (a mask of lanes, or one lane's bit).
#[inline(always)]
pub(crate) fn bool_op(op: BoolOp, x: u32, y: u32) -> u32 {
    match op {
        BoolOp::And => x & y,
        BoolOp::Or => x | y,
        BoolOp::Xor => x ^ y,
    }
}

pub(crate) fn int2(op: I2, t: IT, x: u64, y: u64) -> u64 {
    let m = mask(t.bits);
    let b = t.bits as u32;
    match op {
        I2::Add => x.wrapping_add(y) & m,
        I2::Sub => x.wrapping_sub(y) & m,
        I2::MulLo => x.wrapping_mul(y) & m,
        I2::MulHi => ((wide_mul(t, x, y) >> b) as u64) & m,
        I2::Mul24Lo | I2::Mul24Hi => {
            let (a, c) = if t.signed {
                (sext(x, 24), sext(y, 24))
            } else {
                ((x & 0xff_ffff) as i64, (y & 0xff_ffff) as i64)
            };
            // The 48-bit product fits an i64 exactly; .hi is its bits 47..16.
            let p = a.wrapping_mul(c);
            let p = if op == I2::Mul24Hi { p >> 16 } else { p };
            (p as u64) & m
        }
        I2::Div => {
            let (a, c) = (ival(x, t), ival(y, t));
            if c == 0 {
                m
            } else {
                ((a / c) as u64) & m
            }
        }
        I2::Rem => {
            let (a, c) = (ival(x, t), ival(y, t));
            if c == 0 {
                x & m
            } else {
                ((a % c) as u64) & m
            }
        }
        I2::And => x & y & m,
        I2::Or => (x | y) & m,
        I2::Xor => (x ^ y) & m,
        I2::Shl => {
            let n = (y & 0xffff_ffff) as u32;
            if n >= b {
                0
            } else {
                (x << n) & m
            }
        }
        I2::Shr => {
            let n = (y & 0xffff_ffff) as u32;
            if t.signed {
                ((sext(x, t.bits) >> n.min(63)) as u64) & m
            } else if n >= b {
                0
            } else {
                (x & m) >> n
            }
        }
        I2::Min => {
            if ival(x, t) <= ival(y, t) {
                x & m
            } else {
                y & m
            }
        }
        I2::Max => {
            if ival(x, t) >= ival(y, t) {
                x & m
            } else {
                y & m
            }
        }
        I2::AddSat => (x as i32).saturating_add(y as i32) as u32 as u64,
        I2::SubSat => (x as i32).saturating_sub(y as i32) as u32 as u64,
    }
}

pub(crate) fn int1(op: I1, t: IT, x: u64) -> u64 {
    let m = mask(t.bits);
    let b = t.bits as u32;
    match op {
        I1::Not => !x & m,
        I1::CNot => ((x & m) == 0) as u64,
        I1::Neg => x.wrapping_neg() & m,
        I1::Abs => (sext(x, t.bits).wrapping_abs() as u64) & m,
        I1::Popc => (x & m).count_ones() as u64,
        I1::Clz => ((x & m).leading_zeros() - (64 - b)) as u64,
        I1::Brev => (x & m).reverse_bits() >> (64 - b),
        I1::Bfind | I1::BfindShift => {
            let mut v = x & m;
            if t.signed && (v >> (b - 1)) & 1 == 1 {
                v = !v & m;
            }
            if v == 0 {
                0xffff_ffff
            } else {
                let idx = 63 - v.leading_zeros();
                if op == I1::BfindShift {
                    (b - 1 - idx) as u64
                } else {
                    idx as u64
                }
            }
        }
    }
}

pub(crate) fn int3(op: I3, t: IT, x: u64, y: u64, z: u64) -> u64 {
    let m = mask(t.bits);
    let b = t.bits as u32;
    match op {
        I3::MadLo | I3::MadLoCC => x.wrapping_mul(y).wrapping_add(z) & m,
        I3::MadHi => ((wide_mul(t, x, y) >> b) as u64).wrapping_add(z) & m,
        I3::MadWide => (wide_mul(t, x, y) as u64).wrapping_add(z) & mask(t.bits.saturating_mul(2)),
        I3::Mad24Lo => int2(I2::Mul24Lo, t, x, y).wrapping_add(z) & m,
        I3::Mad24Hi => int2(I2::Mul24Hi, t, x, y).wrapping_add(z) & m,
        I3::Bfe => {
            let msb = b - 1;
            let pos = (y & 0xff) as u32;
            let len = (z & 0xff) as u32;
            let sbit = if t.signed && len != 0 {
                (x >> (pos + len - 1).min(msb)) & 1
            } else {
                0
            };
            let mut d = 0u64;
            for i in 0..b {
                let bit = if i < len && pos + i <= msb {
                    (x >> (pos + i)) & 1
                } else {
                    sbit
                };
                d |= bit << i;
            }
            d & m
        }
        I3::Prmt => {
            let bytes = ((y & 0xffff_ffff) << 32) | (x & 0xffff_ffff);
            let mut d = 0u64;
            for k in 0..4 {
                let sel = (z >> (4 * k)) & 0xf;
                let byte = (bytes >> (8 * (sel & 7))) & 0xff;
                let byte = if sel & 8 != 0 {
                    if byte & 0x80 != 0 {
                        0xff
                    } else {
                        0
                    }
                } else {
                    byte
                };
                d |= byte << (8 * k);
            }
            d
        }
        I3::Shf(mode) => {
            let right = mode & 1 != 0;
            let clamp = mode & 2 != 0;
            let n = if clamp {
                (z as u32).min(32)
            } else {
                z as u32 & 31
            };
            let wide = ((y & 0xffff_ffff) << 32) | (x & 0xffff_ffff);
            if right {
                (wide >> n) & 0xffff_ffff
            } else {
                ((wide << n) >> 32) & 0xffff_ffff
            }
        }
        I3::Szext => {
            let n = if b == 33 {
                (y as u32).min(32)
            } else {
                y as u32 & 31
            };
            if n == 0 {
                0
            } else if t.signed {
                (sext(x, n as u8) as u64) & 0xffff_ffff
            } else {
                x & mask(n as u8) & 0xffff_ffff
            }
        }
        I3::Sad => {
            let (a, c) = (ival(x, t), ival(y, t));
            ((a - c).unsigned_abs() as u64).wrapping_add(z) & m
        }
        I3::Dp4a => {
            let sa = (t.bits - 32) & 1 != 0;
            let sb = (t.bits - 32) & 2 != 0;
            let mut acc = z as u32;
            for k in 0..4 {
                let a = (x >> (8 * k)) & 0xff;
                let c = (y >> (8 * k)) & 0xff;
                let a = if sa { a as u8 as i8 as i32 } else { a as i32 };
                let c = if sb { c as u8 as i8 as i32 } else { c as i32 };
                acc = acc.wrapping_add(a.wrapping_mul(c) as u32);
            }
            acc as u64
        }
        I3::Dp2a(hi) => {
            let sa = (t.bits - 32) & 1 != 0;
            let sb = (t.bits - 32) & 2 != 0;
            let mut acc = z as u32;
            for k in 0..2 {
                let a = (x >> (16 * k)) & 0xffff;
                let c = (y >> (8 * (k + 2 * hi as u64))) & 0xff;
                let a = if sa { a as u16 as i16 as i32 } else { a as i32 };
                let c = if sb { c as u8 as i8 as i32 } else { c as i32 };
                acc = acc.wrapping_add(a.wrapping_mul(c) as u32);
            }
            acc as u64
        }
    }
}

pub(crate) fn bfi(t: IT, a: u64, b: u64, pos: u64, len: u64) -> u64 {
    let bits = t.bits as u32;
    let pos = (pos & 0xff) as u32;
    let len = (len & 0xff) as u32;
    let mut d = b & mask(t.bits);
    for i in 0..len {
        if pos + i >= bits {
            break;
        }
        d = (d & !(1u64 << (pos + i))) | (((a >> i) & 1) << (pos + i));
    }
    d
}

pub(crate) fn mul_wide(t: IT, x: u64, y: u64) -> u64 {
    wide_mul(t, x, y) as u64 & mask(t.bits.saturating_mul(2))
}

#[inline(always)]
fn flush_out(f: FT, ftz: bool, v: u64) -> u64 {
    if ftz {
        float::ftz(f, v)
    } else {
        v
    }
}

pub(crate) fn f2(op: F2, f: FT, rnd: Rnd, ftz: bool, sat: bool, a: u64, b: u64) -> u64 {
    let (a, b) = if ftz {
        (float::ftz(f, a), float::ftz(f, b))
    } else {
        (a, b)
    };
    let r = match op {
        F2::Add => float::add(f, a, b, rnd),
        F2::Sub => float::add(f, a, b ^ sign_bit(f), rnd),
        F2::Mul => float::mul(f, a, b, rnd),
        F2::Div => float::div(f, a, b, rnd),
        F2::DivApprox => {
            let (x, y) = (to_f64(f, a), to_f64(f, b));
            if y.abs() > 2f64.powi(126) {
                // 1/b is below the normal range and flushed: a * 0.
                if x.is_infinite() || x.is_nan() {
                    float::canonical_nan(f)
                } else {
                    (a ^ b) & sign_bit(f)
                }
            } else {
                float::div(f, a, b, rnd)
            }
        }
        F2::Min => float::minmax(f, a, b, false, false),
        F2::Max => float::minmax(f, a, b, true, false),
        F2::MinNaN => float::minmax(f, a, b, false, true),
        F2::MaxNaN => float::minmax(f, a, b, true, true),
        F2::Copysign => (b & !sign_bit(f)) | (a & sign_bit(f)),
    };
    let r = flush_out(f, ftz, r);
    if sat {
        float::sat(f, r)
    } else {
        r
    }
}

pub(crate) fn sign_bit(f: FT) -> u64 {
    match f {
        FT::F16 | FT::BF16 => 0x8000,
        FT::F32 => 0x8000_0000,
        FT::F64 => 1 << 63,
    }
}

pub(crate) fn f1(op: F1, f: FT, rnd: Rnd, ftz: bool, sat: bool, a: u64) -> u64 {
    let a = if ftz { float::ftz(f, a) } else { a };
    let approx = |v: f64| {
        if v.is_nan() {
            float::canonical_nan(f)
        } else {
            float::from_f64(f, v, 0, Rnd::N)
        }
    };
    let x = to_f64(f, a);
    let r = match op {
        F1::Neg => a ^ sign_bit(f),
        F1::Abs => a & !sign_bit(f),
        F1::Sqrt => float::sqrt(f, a, rnd),
        F1::Rcp => float::rcp(f, a, rnd),
        F1::Rsqrt => approx(1.0 / x.sqrt()),
        F1::Sin => approx(x.sin()),
        F1::Cos => approx(x.cos()),
        F1::Ex2 => approx(x.exp2()),
        F1::Lg2 => approx(x.log2()),
        F1::Tanh => approx(x.tanh()),
    };
    let r = if matches!(op, F1::Neg | F1::Abs) {
        r
    } else {
        flush_out(f, ftz, r)
    };
    if sat {
        float::sat(f, r)
    } else {
        r
    }
}

pub(crate) fn fma(f: FT, rnd: Rnd, ftz: bool, sat: bool, a: u64, b: u64, c: u64) -> u64 {
    let (a, b, c) = if ftz {
        (float::ftz(f, a), float::ftz(f, b), float::ftz(f, c))
    } else {
        (a, b, c)
    };
    let r = flush_out(f, ftz, float::fma(f, a, b, c, rnd));
    if sat {
        float::sat(f, r)
    } else {
        r
    }
}

/// Applies a scalar half op to both 16-bit halves.
pub(crate) fn x2(a: u64, b: u64, c: u64, g: impl Fn(u64, u64, u64) -> u64) -> u64 {
    let lo = g(a & 0xffff, b & 0xffff, c & 0xffff) & 0xffff;
    let hi = g((a >> 16) & 0xffff, (b >> 16) & 0xffff, (c >> 16) & 0xffff) & 0xffff;
    lo | (hi << 16)
}

fn round_int(v: f64, r: Rnd) -> f64 {
    match r {
        Rnd::N => v.round_ties_even(),
        Rnd::Z => v.trunc(),
        Rnd::M => v.floor(),
        Rnd::P => v.ceil(),
        Rnd::A => v.round(),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn cvt(
    dt: Ty,
    st: Ty,
    rnd: Option<Rnd>,
    int_rnd: bool,
    ftz: bool,
    sat: bool,
    x: u64,
) -> u64 {
    match (dt, st) {
        (Ty::I(d), Ty::I(s)) => {
            let v = ival(x, s);
            let v = if sat {
                let (lo, hi) = range(d);
                v.clamp(lo, hi)
            } else {
                v
            };
            (v as u64) & mask(d.bits)
        }
        (Ty::I(d), Ty::F(s)) => {
            let x = if ftz { float::ftz(s, x) } else { x };
            let v = to_f64(s, x);
            if v.is_nan() {
                return 0;
            }
            let r = round_int(v, rnd.unwrap_or(Rnd::Z));
            let (lo, hi) = range(d);
            // Float-to-integer conversions always saturate in PTX.
            let i = if r <= lo as f64 {
                lo
            } else if r >= hi as f64 {
                hi
            } else {
                r as i128
            };
            (i as u64) & mask(d.bits)
        }
        (Ty::F(d), Ty::I(s)) => {
            let v = ival(x, s);
            let r = v as f64;
            let back = if r >= 1.8e19 {
                u64::MAX as i128 + 1
            } else {
                r as i128
            };
            let err = (v - back).signum() as i8;
            let out = float::from_f64(d, r, err, rnd.unwrap_or(Rnd::N));
            let out = if ftz { float::ftz(d, out) } else { out };
            if sat {
                float::sat(d, out)
            } else {
                out
            }
        }
        (Ty::F(d), Ty::F(s)) => {
            let x = if ftz { float::ftz(s, x) } else { x };
            let v = to_f64(s, x);
            let out = if int_rnd {
                if v.is_nan() {
                    float::canonical_nan(d)
                } else {
                    float::from_f64(d, round_int(v, rnd.unwrap_or(Rnd::N)), 0, Rnd::N)
                }
            } else if v.is_nan() && d != FT::F64 {
                float::canonical_nan(d)
            } else {
                float::from_f64(d, v, 0, rnd.unwrap_or(Rnd::N))
            };
            let out = if ftz { float::ftz(d, out) } else { out };
            if sat {
                float::sat(d, out)
            } else {
                out
            }
        }
    }
}

fn range(t: IT) -> (i128, i128) {
    if t.signed {
        (-(1i128 << (t.bits - 1)), (1i128 << (t.bits - 1)) - 1)
    } else {
        (0, (1i128 << t.bits) - 1)
    }
}

pub(crate) fn compare(t: Ty, cmp: Cmp, ftz: bool, a: u64, b: u64) -> bool {
    match t {
        Ty::I(it) => {
            let (x, y) = (ival(a, it), ival(b, it));
            match cmp {
                Cmp::Eq => x == y,
                Cmp::Ne => x != y,
                Cmp::Lt => x < y,
                Cmp::Le => x <= y,
                Cmp::Gt => x > y,
                Cmp::Ge => x >= y,
                _ => false,
            }
        }
        Ty::F(f) => {
            let (a, b) = if ftz {
                (float::ftz(f, a), float::ftz(f, b))
            } else {
                (a, b)
            };
            let (x, y) = (to_f64(f, a), to_f64(f, b));
            let un = x.is_nan() || y.is_nan();
            match cmp {
                Cmp::Eq => !un && x == y,
                Cmp::Ne => !un && x != y,
                Cmp::Lt => !un && x < y,
                Cmp::Le => !un && x <= y,
                Cmp::Gt => !un && x > y,
                Cmp::Ge => !un && x >= y,
                Cmp::Equ => un || x == y,
                Cmp::Neu => un || x != y,
                Cmp::Ltu => un || x < y,
                Cmp::Leu => un || x <= y,
                Cmp::Gtu => un || x > y,
                Cmp::Geu => un || x >= y,
                Cmp::Num => !un,
                Cmp::Nan => un,
            }
        }
    }
}

pub(crate) fn testp(kind: TestpKind, f: FT, a: u64) -> bool {
    let x = to_f64(f, a);
    let sub = match f {
        FT::F32 => a as u32 & 0x7f80_0000 == 0 && a as u32 & 0x7f_ffff != 0,
        FT::F64 => a & 0x7ff0_0000_0000_0000 == 0 && a & 0xf_ffff_ffff_ffff != 0,
        _ => false,
    };
    match kind {
        TestpKind::Finite => x.is_finite(),
        TestpKind::Infinite => x.is_infinite(),
        TestpKind::Number => !x.is_nan(),
        TestpKind::NotANumber => x.is_nan(),
        TestpKind::Normal => x.is_finite() && x != 0.0 && !sub,
        TestpKind::Subnormal => sub,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const U32: IT = IT {
        bits: 32,
        signed: false,
    };
    const S32: IT = IT {
        bits: 32,
        signed: true,
    };

    #[test]
    fn integer_ops() {
        assert_eq!(int2(I2::Add, U32, 0xffff_ffff, 1), 0);
        assert_eq!(int2(I2::MulHi, U32, 0x8000_0000, 4), 2);
        assert_eq!(int2(I2::MulHi, S32, (-2i32) as u32 as u64, 0x8000_0000), 1);
        assert_eq!(
            int2(I2::Div, S32, (-7i32) as u32 as u64, 2),
            (-3i32) as u32 as u64
        );
        assert_eq!(
            int2(I2::Rem, S32, (-7i32) as u32 as u64, 2),
            (-1i32) as u32 as u64
        );
        assert_eq!(int2(I2::Div, U32, 7, 0), 0xffff_ffff);
        assert_eq!(int2(I2::Shr, S32, 0x8000_0000, 40), 0xffff_ffff);
        assert_eq!(int2(I2::Shr, U32, 0x8000_0000, 31), 1);
        assert_eq!(int2(I2::Shl, U32, 1, 32), 0);
        assert_eq!(int2(I2::Min, S32, (-1i32) as u32 as u64, 3), 0xffff_ffff);
        assert_eq!(int2(I2::Min, U32, (-1i32) as u32 as u64, 3), 3);
        assert_eq!(int1(I1::Clz, U32, 1), 31);
        assert_eq!(int1(I1::Clz, U32, 0), 32);
        assert_eq!(int1(I1::Brev, U32, 1), 0x8000_0000);
        assert_eq!(
            int1(
                I1::Popc,
                IT {
                    bits: 64,
                    signed: false
                },
                u64::MAX
            ),
            64
        );
        assert_eq!(int1(I1::Bfind, U32, 0x10), 4);
        assert_eq!(int3(I3::Bfe, U32, 0xabcd, 4, 8), 0xbc);
        assert_eq!(int3(I3::Bfe, S32, 0x80, 4, 4), 0xffff_fff8);
        assert_eq!(bfi(U32, 0xf, 0, 4, 4), 0xf0);
        assert_eq!(
            int3(I3::Prmt, U32, 0x4433_2211, 0x8877_6655, 0x3210),
            0x4433_2211
        );
        assert_eq!(
            int3(I3::Prmt, U32, 0x4433_2211, 0x8877_6655, 0x7654),
            0x8877_6655
        );
        assert_eq!(
            int3(I3::Prmt, U32, 0x4433_2211, 0x8877_6655, 0x0008),
            0x1111_1100
        );
        assert_eq!(mul_wide(S32, (-3i32) as u32 as u64, 5), (-15i64) as u64);
        assert_eq!(int3(I3::Shf(0), U32, 0x8000_0000, 1, 1), 3);
    }

    #[test]
    fn conversions() {
        let f32t = Ty::F(FT::F32);
        let s32 = Ty::I(S32);
        let u8t = Ty::I(IT {
            bits: 8,
            signed: false,
        });
        assert_eq!(
            cvt(
                s32,
                f32t,
                Some(Rnd::Z),
                true,
                false,
                false,
                (-2.7f32).to_bits() as u64
            ),
            (-2i32) as u32 as u64
        );
        assert_eq!(
            cvt(
                s32,
                f32t,
                Some(Rnd::N),
                true,
                false,
                false,
                2.5f32.to_bits() as u64
            ),
            2
        );
        assert_eq!(
            cvt(
                s32,
                f32t,
                Some(Rnd::Z),
                true,
                false,
                false,
                1e20f32.to_bits() as u64
            ),
            0x7fff_ffff
        );
        assert_eq!(
            cvt(
                s32,
                f32t,
                Some(Rnd::Z),
                true,
                false,
                false,
                f32::NAN.to_bits() as u64
            ),
            0
        );
        assert_eq!(
            cvt(u8t, s32, None, false, false, true, (-5i32) as u32 as u64),
            0
        );
        assert_eq!(
            cvt(
                Ty::I(IT {
                    bits: 64,
                    signed: false
                }),
                s32,
                None,
                false,
                false,
                false,
                0xffff_ffff
            ),
            u64::MAX
        );
        let big = (1u64 << 60) + 1;
        let u64t = Ty::I(IT {
            bits: 64,
            signed: false,
        });
        assert_eq!(
            cvt(f32t, u64t, Some(Rnd::P), false, false, false, big),
            ((1u64 << 60) as f32).to_bits() as u64 + 1
        );
        assert_eq!(
            cvt(f32t, u64t, Some(Rnd::N), false, false, false, big),
            ((1u64 << 60) as f32).to_bits() as u64
        );
        assert_eq!(
            cvt(
                f32t,
                f32t,
                Some(Rnd::M),
                true,
                false,
                false,
                (-0.5f32).to_bits() as u64
            ),
            (-1f32).to_bits() as u64
        );
    }
}
