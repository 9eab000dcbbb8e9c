//! f32 fused multiply-add over a warp using the host's FMA unit when it has one (the portable
//! `mul_add` falls back to a library call per lane).

use std::sync::OnceLock;

static HAS_FMA: OnceLock<bool> = OnceLock::new();

pub(crate) fn available() -> bool {
    *HAS_FMA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// `o = fma(a, b, c)` per lane on f32 bits, NaN results canonical. Callers check `available()`.
pub(crate) fn fma32(a: &[u64; 32], b: &[u64; 32], c: &[u64; 32], o: &mut [u64; 32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if available() {
            // SAFETY: the CPU supports FMA (checked above).
            unsafe { fma32_x86(a, b, c, o) };
            return;
        }
    }
    for l in 0..32 {
        o[l] = one(a[l], b[l], c[l]);
    }
}

#[inline(always)]
fn one(a: u64, b: u64, c: u64) -> u64 {
    let r = f32::from_bits(a as u32).mul_add(f32::from_bits(b as u32), f32::from_bits(c as u32));
    if r.is_nan() {
        crate::float::NAN32 as u64
    } else {
        r.to_bits() as u64
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fma32_x86(a: &[u64; 32], b: &[u64; 32], c: &[u64; 32], o: &mut [u64; 32]) {
    for l in 0..32 {
        o[l] = one(a[l], b[l], c[l]);
    }
}
