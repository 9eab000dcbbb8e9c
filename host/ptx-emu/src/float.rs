//! IEEE arithmetic with PTX's rounding modes, bit-exact.
//!
//! Narrow formats (f32, f16, bf16) are computed in f64 and then rounded once more with an exact
//! record of which side of the f64 result the true value lies on (`err`: -1, 0, +1). With that
//! sticky information the second rounding is correct in every mode, so there is no
//! double-rounding error. f64 results use the host's round-to-nearest and step one ulp for the
//! directed modes, using exact error terms (TwoSum, fma residuals).

use crate::ir::{Rnd, FT};

/// The NaN a GPU produces for f32 arithmetic.
pub(crate) const NAN32: u32 = 0x7fff_ffff;
pub(crate) const NAN16: u16 = 0x7fff;

#[derive(Clone, Copy)]
struct Fmt {
    mant: u32,
    exp: u32,
}

const F32F: Fmt = Fmt { mant: 23, exp: 8 };
const F16F: Fmt = Fmt { mant: 10, exp: 5 };
const BF16F: Fmt = Fmt { mant: 7, exp: 8 };

fn fmt_of(f: FT) -> Fmt {
    match f {
        FT::F16 => F16F,
        FT::BF16 => BF16F,
        _ => F32F,
    }
}

/// Rounds the real value `r` (+ an infinitesimal of sign `err`) to a narrow format's bits.
fn round_narrow(fmt: Fmt, r: f64, err: i8, mode: Rnd) -> u64 {
    let sign_bit = 1u64 << (fmt.mant + fmt.exp);
    let exp_all = (1u64 << fmt.exp) - 1;
    let inf = exp_all << fmt.mant;
    if r.is_nan() {
        return if fmt.mant == 23 {
            NAN32 as u64
        } else {
            NAN16 as u64
        };
    }
    let neg = r.is_sign_negative();
    let s = if neg { sign_bit } else { 0 };
    if r.is_infinite() {
        return s | inf;
    }
    // Error direction in terms of magnitude.
    let em = if neg { -err } else { err };
    let a = r.abs();
    let bias = (1i64 << (fmt.exp - 1)) - 1;
    let emin = 1 - bias;
    let emax = bias;
    let max_mag = inf - 1;
    let (mag_lo, mag_hi, pos) = if a == 0.0 {
        // Zero with a pending error: the value is a tiny non-zero of sign `err`.
        match em {
            0 => return s,
            1 => (0u64, 1u64, Pos::Below),
            _ => return s, // |true| < 0 cannot happen
        }
    } else {
        let bits = a.to_bits();
        let e64 = ((bits >> 52) & 0x7ff) as i64;
        let (m, e) = if e64 == 0 {
            (bits & ((1 << 52) - 1), -1074i64)
        } else {
            ((bits & ((1 << 52) - 1)) | (1 << 52), e64 - 1075)
        };
        // a = m * 2^e; its binary exponent:
        let x = 63 - m.leading_zeros() as i64 + e;
        if x > emax {
            // Beyond the largest finite value: candidates are MAX and infinity.
            (max_mag, inf, Pos::Above)
        } else {
            let q = x.max(emin) - fmt.mant as i64;
            let shift = q - e;
            let (int, class) = if shift <= 0 {
                (m << (-shift) as u32, Pos::Exact)
            } else if shift >= 64 {
                (0, Pos::Below)
            } else {
                let int = m >> shift;
                let rem = m & ((1u64 << shift) - 1);
                let half = 1u64 << (shift - 1);
                let c = if rem == 0 {
                    Pos::Exact
                } else if rem < half {
                    Pos::Below
                } else if rem == half {
                    Pos::Half
                } else {
                    Pos::Above
                };
                (int, c)
            };
            // Encode int * 2^q: normal numbers have int in [2^mant, 2^(mant+1)).
            let enc = if int >= 1u64 << fmt.mant {
                (((x + bias) as u64) << fmt.mant) | (int - (1u64 << fmt.mant))
            } else {
                int
            };
            match (class, em) {
                (Pos::Exact, 0) => return s | enc,
                (Pos::Exact, 1) => (enc, enc + 1, Pos::Below),
                (Pos::Exact, _) => (enc - 1, enc, Pos::NearHi),
                (Pos::Half, 1) => (enc, enc + 1, Pos::Above),
                (Pos::Half, -1) => (enc, enc + 1, Pos::Below),
                (c, _) => (enc, enc + 1, c),
            }
        }
    };
    let up = match mode {
        Rnd::Z => false,
        Rnd::A => !matches!(pos, Pos::Below),
        Rnd::M => neg,
        Rnd::P => !neg,
        Rnd::N => match pos {
            Pos::Below => false,
            Pos::Above | Pos::NearHi => true,
            Pos::Half => mag_lo & 1 == 1,
            Pos::Exact => false,
        },
    };
    // Directed modes towards a bound never produce infinity from a finite value.
    let mag = if up { mag_hi } else { mag_lo };
    s | mag.min(inf)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pos {
    Exact,
    Below,
    Half,
    Above,
    /// Just below the upper candidate (closer to it than any tie).
    NearHi,
}

/// Steps an f64 result one ulp for the directed modes, given the sign of (true - r).
fn adjust64(r: f64, err: i8, mode: Rnd) -> f64 {
    if err == 0 || r.is_nan() {
        return r;
    }
    let toward_neg = match mode {
        Rnd::N | Rnd::A => return r,
        Rnd::M => true,
        Rnd::P => false,
        Rnd::Z => r > 0.0 || (r == 0.0 && err > 0),
    };
    if r.is_infinite() {
        // Overflowed under round-to-nearest: the directed modes may clamp to the largest finite.
        return if (r > 0.0 && toward_neg) || (r < 0.0 && !toward_neg) {
            f64::MAX.copysign(r)
        } else {
            r
        };
    }
    if toward_neg && err < 0 {
        next_down(r)
    } else if !toward_neg && err > 0 {
        next_up(r)
    } else {
        r
    }
}

fn next_up(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    f64::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}

fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

fn sgn(x: f64) -> i8 {
    if x > 0.0 {
        1
    } else if x < 0.0 {
        -1
    } else {
        0
    }
}

fn two_sum(a: f64, b: f64) -> (f64, i8) {
    let s = a + b;
    if !s.is_finite() {
        return (s, 0);
    }
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, sgn(e))
}

// ---- format conversions ----

pub(crate) fn f16_to_f64(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let m = (h & 0x3ff) as f64;
    if e == 0 {
        s * m * 2f64.powi(-24)
    } else if e == 31 {
        if m == 0.0 {
            s * f64::INFINITY
        } else {
            f64::NAN
        }
    } else {
        s * (1.0 + m / 1024.0) * 2f64.powi(e - 15)
    }
}

pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

pub(crate) fn f32_to_f16(x: f32, r: Rnd) -> u16 {
    round_narrow(F16F, x as f64, 0, r) as u16
}

pub(crate) fn f64_to_f16(x: f64, r: Rnd) -> u16 {
    round_narrow(F16F, x, 0, r) as u16
}

pub(crate) fn f32_to_bf16(x: f32, r: Rnd) -> u16 {
    round_narrow(BF16F, x as f64, 0, r) as u16
}

/// The value of a register holding format `f`, as f64 (exact for every format).
#[inline]
pub(crate) fn to_f64(f: FT, bits: u64) -> f64 {
    match f {
        FT::F32 => f32::from_bits(bits as u32) as f64,
        FT::F64 => f64::from_bits(bits),
        FT::F16 => f16_to_f64(bits as u16),
        FT::BF16 => bf16_to_f32(bits as u16) as f64,
    }
}

/// Rounds `r` (+ infinitesimal of sign `err`) into format `f`.
#[inline]
pub(crate) fn from_f64(f: FT, r: f64, err: i8, mode: Rnd) -> u64 {
    match f {
        FT::F64 => adjust64(r, err, mode).to_bits(),
        FT::F32 if err == 0 && mode == Rnd::N => {
            let v = r as f32;
            if v.is_nan() {
                NAN32 as u64
            } else {
                v.to_bits() as u64
            }
        }
        _ => round_narrow(fmt_of(f), r, err, mode),
    }
}

pub(crate) fn is_nan(f: FT, bits: u64) -> bool {
    match f {
        FT::F32 => f32::from_bits(bits as u32).is_nan(),
        FT::F64 => f64::from_bits(bits).is_nan(),
        FT::F16 => bits as u16 & 0x7c00 == 0x7c00 && bits as u16 & 0x3ff != 0,
        FT::BF16 => bits as u16 & 0x7f80 == 0x7f80 && bits as u16 & 0x7f != 0,
    }
}

pub(crate) fn canonical_nan(f: FT) -> u64 {
    match f {
        FT::F32 => NAN32 as u64,
        FT::F64 => 0x7fff_ffff_ffff_ffff,
        FT::F16 | FT::BF16 => NAN16 as u64,
    }
}

/// Flushes a subnormal input to a zero of the same sign (`.ftz`).
#[inline]
pub(crate) fn ftz(f: FT, bits: u64) -> u64 {
    match f {
        FT::F32 => {
            if bits as u32 & 0x7f80_0000 == 0 {
                bits & 0x8000_0000
            } else {
                bits
            }
        }
        FT::F64 => {
            if bits & 0x7ff0_0000_0000_0000 == 0 {
                bits & (1 << 63)
            } else {
                bits
            }
        }
        FT::F16 => {
            if bits as u16 & 0x7c00 == 0 {
                bits & 0x8000
            } else {
                bits
            }
        }
        FT::BF16 => {
            if bits as u16 & 0x7f80 == 0 {
                bits & 0x8000
            } else {
                bits
            }
        }
    }
}

/// Clamps to [0, 1], NaN to 0 (`.sat`).
pub(crate) fn sat(f: FT, bits: u64) -> u64 {
    let v = to_f64(f, bits);
    if v.is_nan() || v <= 0.0 {
        0
    } else if v >= 1.0 {
        from_f64(f, 1.0, 0, Rnd::N)
    } else {
        bits
    }
}

// ---- arithmetic ----

pub(crate) fn add(f: FT, a: u64, b: u64, m: Rnd) -> u64 {
    let (x, y) = (to_f64(f, a), to_f64(f, b));
    if f == FT::F64 {
        let (s, e) = two_sum(x, y);
        return adjust64(s, e, m).to_bits();
    }
    let (s, e) = two_sum(x, y);
    nan_or(f, s, e, m)
}

fn nan_or(f: FT, r: f64, e: i8, m: Rnd) -> u64 {
    if r.is_nan() {
        canonical_nan(f)
    } else {
        from_f64(f, r, e, m)
    }
}

pub(crate) fn mul(f: FT, a: u64, b: u64, m: Rnd) -> u64 {
    let (x, y) = (to_f64(f, a), to_f64(f, b));
    let p = x * y;
    if f == FT::F64 {
        let e = if p.is_finite() {
            sgn(x.mul_add(y, -p))
        } else {
            0
        };
        return adjust64(p, e, m).to_bits();
    }
    // Products of two f32 (24-bit) significands are exact in f64.
    nan_or(f, p, 0, m)
}

pub(crate) fn div(f: FT, a: u64, b: u64, m: Rnd) -> u64 {
    let (x, y) = (to_f64(f, a), to_f64(f, b));
    let q = x / y;
    let e = if q.is_finite() && q != 0.0 && y.is_finite() {
        sgn((-q).mul_add(y, x)) * sgn(y)
    } else {
        0
    };
    if f == FT::F64 {
        return adjust64(q, e, m).to_bits();
    }
    nan_or(f, q, e, m)
}

pub(crate) fn fma(f: FT, a: u64, b: u64, c: u64, m: Rnd) -> u64 {
    let (x, y, z) = (to_f64(f, a), to_f64(f, b), to_f64(f, c));
    if f == FT::F64 {
        let r = x.mul_add(y, z);
        if m == Rnd::N || !r.is_finite() {
            return r.to_bits();
        }
        // true - r = (s - r) + es + pe, where p + pe = x*y and s + es = p + z exactly. The last
        // sum is evaluated in f64; its sign is exact unless the terms cancel below 2^-1074.
        let p = x * y;
        let pe = x.mul_add(y, -p);
        let s = p + z;
        let bb = s - p;
        let es = (p - (s - bb)) + (z - bb);
        let e = sgn((s - r) + (es + pe));
        return adjust64(r, e, m).to_bits();
    }
    // x*y is exact in f64 for every narrow format.
    let p = x * y;
    let (s, e) = two_sum(p, z);
    nan_or(f, s, e, m)
}

pub(crate) fn sqrt(f: FT, a: u64, m: Rnd) -> u64 {
    let x = to_f64(f, a);
    let r = x.sqrt();
    let e = if r.is_finite() && r > 0.0 {
        sgn((-r).mul_add(r, x))
    } else {
        0
    };
    if f == FT::F64 {
        return adjust64(r, e, m).to_bits();
    }
    nan_or(f, r, e, m)
}

pub(crate) fn rcp(f: FT, a: u64, m: Rnd) -> u64 {
    div(f, from_f64(f, 1.0, 0, Rnd::N), a, m)
}

/// PTX min/max: a NaN operand is ignored; -0 < +0.
pub(crate) fn minmax(f: FT, a: u64, b: u64, max: bool, nan_prop: bool) -> u64 {
    let an = is_nan(f, a);
    let bn = is_nan(f, b);
    if an || bn {
        if nan_prop || (an && bn) {
            return canonical_nan(f);
        }
        return if an { b } else { a };
    }
    let (x, y) = (to_f64(f, a), to_f64(f, b));
    let pick_a = if x == y {
        // Zeros of different signs: min prefers -0, max +0.
        let a_neg = x.is_sign_negative();
        if max {
            !a_neg
        } else {
            a_neg
        }
    } else if max {
        x > y
    } else {
        x < y
    };
    if pick_a {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32r(x: f64, err: i8, m: Rnd) -> f32 {
        f32::from_bits(round_narrow(F32F, x, err, m) as u32)
    }

    #[test]
    fn narrow_rounding_matches_host_for_nearest() {
        for &x in &[
            1.0f64,
            1.0 + 1e-9,
            3.25,
            -2.5e-40,
            1e39,
            -1e-46,
            6.0e-39,
            65504.0,
            1.0 / 3.0,
        ] {
            assert_eq!(f32r(x, 0, Rnd::N).to_bits(), (x as f32).to_bits(), "{x}");
        }
    }

    #[test]
    fn directed_rounding() {
        let x = 1.0f64 + 2f64.powi(-30); // between 1 and 1+2^-23
        assert_eq!(f32r(x, 0, Rnd::Z), 1.0);
        assert_eq!(f32r(x, 0, Rnd::P), 1.0 + 2f32.powi(-23));
        assert_eq!(f32r(-x, 0, Rnd::M), -(1.0 + 2f32.powi(-23)));
        assert_eq!(f32r(-x, 0, Rnd::P), -1.0);
        // Exact value with a pending negative error truncates one ulp down.
        assert_eq!(f32r(2.0, -1, Rnd::Z), 2.0 - 2f32.powi(-23));
        assert_eq!(f32r(2.0, -1, Rnd::N), 2.0);
        // Overflow.
        assert_eq!(f32r(1e300, 0, Rnd::Z), f32::MAX);
        assert_eq!(f32r(1e300, 0, Rnd::N), f32::INFINITY);
        // Midpoint tie broken by the error sign.
        let mid = 1.0 + 2f64.powi(-24);
        assert_eq!(f32r(mid, 0, Rnd::N), 1.0);
        assert_eq!(f32r(mid, 1, Rnd::N), 1.0 + 2f32.powi(-23));
    }

    #[test]
    fn f16_conversions() {
        assert_eq!(f32_to_f16(1.0, Rnd::N), 0x3c00);
        assert_eq!(f32_to_f16(65504.0, Rnd::N), 0x7bff);
        assert_eq!(f32_to_f16(65520.0, Rnd::N), 0x7c00);
        assert_eq!(f32_to_f16(2f32.powi(-24), Rnd::N), 0x0001);
        assert_eq!(f32_to_f16(-0.0, Rnd::N), 0x8000);
        assert_eq!(f16_to_f64(0x3555), 0.333251953125);
        assert_eq!(f32_to_bf16(1.0, Rnd::N), 0x3f80);
        assert_eq!(bf16_to_f32(0x4049), 3.140625);
    }

    #[test]
    fn f32_ops_are_correctly_rounded() {
        let a = 0.1f32.to_bits() as u64;
        let b = 0.2f32.to_bits() as u64;
        assert_eq!(
            add(FT::F32, a, b, Rnd::N),
            (0.1f32 + 0.2f32).to_bits() as u64
        );
        assert_eq!(
            mul(FT::F32, a, b, Rnd::N),
            (0.1f32 * 0.2f32).to_bits() as u64
        );
        assert_eq!(
            div(FT::F32, a, b, Rnd::N),
            (0.1f32 / 0.2f32).to_bits() as u64
        );
        assert_eq!(
            fma(FT::F32, a, b, a, Rnd::N),
            0.1f32.mul_add(0.2, 0.1).to_bits() as u64
        );
        let q_rz = f32::from_bits(div(
            FT::F32,
            1f32.to_bits() as u64,
            3f32.to_bits() as u64,
            Rnd::Z,
        ) as u32);
        let q_rp = f32::from_bits(div(
            FT::F32,
            1f32.to_bits() as u64,
            3f32.to_bits() as u64,
            Rnd::P,
        ) as u32);
        assert!(q_rz < q_rp && (q_rz as f64) < 1.0 / 3.0 && (q_rp as f64) > 1.0 / 3.0);
        let nan = add(
            FT::F32,
            f32::INFINITY.to_bits() as u64,
            f32::NEG_INFINITY.to_bits() as u64,
            Rnd::N,
        );
        assert_eq!(nan, NAN32 as u64);
    }
}
