//! Address decoding and atomics. Every access is resolved to a `Loc` only after its full extent
//! has been checked against the space it lands in.

use std::sync::atomic::Ordering::Relaxed;

use crate::exec::warp::{show_addr, Warp};
use crate::exec::{CtaCtx, Launch};
use crate::float;
use crate::ir::*;
use crate::memory::Region;

#[derive(Clone, Copy)]
pub(crate) enum Loc<'r> {
    Atomic(&'r Region, u64),
    Shared(usize),
    Local(usize),
    TParam(usize),
    Args(usize),
}

fn in_win(a: u64, base: u64) -> Option<u64> {
    let off = a.wrapping_sub(base);
    (off < WIN_SIZE).then_some(off)
}

fn fits(off: u64, size: u32, len: usize) -> bool {
    off.checked_add(size as u64)
        .is_some_and(|e| e <= len as u64)
}

impl Warp {
    /// Resolves `[a, a+size)` in space `sp` for lane `l`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn locate<'r>(
        &mut self,
        cx: &'r Launch<'_>,
        cta: &CtaCtx<'_>,
        sp: Space,
        a: u64,
        size: u32,
        l: usize,
        write: bool,
    ) -> Result<Loc<'r>, String> {
        let oob = |what: &str| {
            format!(
                "out-of-bounds {what} of {size} bytes at {}",
                show_addr(sp, a)
            )
        };
        let what = if write { "write" } else { "read" };
        match sp {
            Space::Global | Space::Const => {
                if let Some(off) = in_win(a, MODULE_WIN) {
                    if fits(off, size, cx.module_data.len() as usize) {
                        return Ok(Loc::Atomic(cx.module_data, off));
                    }
                    return Err(oob(what));
                }
                if sp == Space::Const {
                    return Err(oob(what));
                }
                match cx.globals.find(a, size, &mut self.hint) {
                    Some((r, off)) => Ok(Loc::Atomic(r, off)),
                    None => Err(format!(
                        "out-of-bounds global {what} of {size} bytes at address {a:#x}: no live allocation covers it"
                    )),
                }
            }
            Space::Shared => {
                if fits(a, size, cta.shared.len()) {
                    Ok(Loc::Shared(a as usize))
                } else {
                    Err(format!(
                        "{} (the block has {} bytes of shared memory)",
                        oob(what),
                        cta.shared.len()
                    ))
                }
            }
            Space::Local => {
                if fits(a, size, self.local_size) {
                    Ok(Loc::Local(l * self.local_size + a as usize))
                } else {
                    Err(oob(what))
                }
            }
            Space::Param => {
                if a >= TPARAM_FLAG {
                    let off = a - TPARAM_FLAG;
                    if fits(off, size, self.tparam_size) {
                        return Ok(Loc::TParam(l * self.tparam_size + off as usize));
                    }
                    return Err(oob(what));
                }
                if write {
                    return Err("kernel parameters are read-only".into());
                }
                if fits(a, size, cx.args.len()) {
                    Ok(Loc::Args(a as usize))
                } else {
                    Err(oob(what))
                }
            }
            Space::Generic => {
                if a < SHARED_WIN {
                    return self.locate(cx, cta, Space::Global, a, size, l, write);
                }
                if let Some(off) = in_win(a, SHARED_WIN) {
                    return self.locate(cx, cta, Space::Shared, off, size, l, write);
                }
                if let Some(off) = in_win(a, LOCAL_WIN) {
                    return self.locate(cx, cta, Space::Local, off, size, l, write);
                }
                if let Some(off) = in_win(a, PARAM_WIN) {
                    return self.locate(cx, cta, Space::Param, off, size, l, write);
                }
                self.locate(cx, cta, Space::Global, a, size, l, write)
            }
        }
    }
}

/// The value an atomic stores, given the old value.
pub(crate) fn atom_apply(op: AtomOp, t: AtomTy, old: u64, b: u64, c: u64) -> u64 {
    let signed = matches!(t, AtomTy::S32 | AtomTy::S64);
    let w64 = matches!(t, AtomTy::U64 | AtomTy::S64 | AtomTy::B64 | AtomTy::F64);
    let key = |x: u64| -> i128 {
        match (signed, w64) {
            (true, true) => x as i64 as i128,
            (true, false) => x as u32 as i32 as i128,
            (false, true) => x as i128,
            (false, false) => (x as u32) as i128,
        }
    };
    let m = if w64 { u64::MAX } else { 0xffff_ffff };
    let r = match op {
        AtomOp::Add => match t {
            AtomTy::F32 => float::add(FT::F32, old, b, Rnd::N),
            AtomTy::F64 => float::add(FT::F64, old, b, Rnd::N),
            AtomTy::F16 => float::add(FT::F16, old, b, Rnd::N),
            AtomTy::BF16 => float::add(FT::BF16, old, b, Rnd::N),
            AtomTy::F16x2 => {
                crate::exec::ops::x2(old, b, 0, |p, q, _| float::add(FT::F16, p, q, Rnd::N))
            }
            AtomTy::BF16x2 => {
                crate::exec::ops::x2(old, b, 0, |p, q, _| float::add(FT::BF16, p, q, Rnd::N))
            }
            _ => old.wrapping_add(b),
        },
        AtomOp::Min => {
            if key(old) <= key(b) {
                old
            } else {
                b
            }
        }
        AtomOp::Max => {
            if key(old) >= key(b) {
                old
            } else {
                b
            }
        }
        AtomOp::Inc => {
            let (o, b) = (old as u32, b as u32);
            (if o >= b { 0 } else { o + 1 }) as u64
        }
        AtomOp::Dec => {
            let (o, b) = (old as u32, b as u32);
            (if o == 0 || o > b { b } else { o - 1 }) as u64
        }
        AtomOp::And => old & b,
        AtomOp::Or => old | b,
        AtomOp::Xor => old ^ b,
        AtomOp::Exch => b,
        AtomOp::Cas => {
            if old & m == b & m {
                c
            } else {
                old
            }
        }
    };
    r & if matches!(t, AtomTy::F16 | AtomTy::BF16) {
        0xffff
    } else {
        m
    }
}

/// A read-modify-write on global memory; returns the old value.
pub(crate) fn atomic_global(
    r: &Region,
    off: u64,
    size: u32,
    op: AtomOp,
    t: AtomTy,
    b: u64,
    c: u64,
) -> u64 {
    match size {
        8 => {
            let a = r.atomic64(off);
            match op {
                AtomOp::Add if !matches!(t, AtomTy::F64) => a.fetch_add(b, Relaxed),
                AtomOp::Exch => a.swap(b, Relaxed),
                AtomOp::Cas => match a.compare_exchange(b, c, Relaxed, Relaxed) {
                    Ok(v) | Err(v) => v,
                },
                _ => a
                    .fetch_update(Relaxed, Relaxed, |o| Some(atom_apply(op, t, o, b, c)))
                    .unwrap_or_else(|v| v),
            }
        }
        4 => {
            let a = r.atomic32(off);
            let (b32, c32) = (b as u32, c as u32);
            (match op {
                AtomOp::Add if !matches!(t, AtomTy::F32 | AtomTy::F16x2 | AtomTy::BF16x2) => {
                    a.fetch_add(b32, Relaxed)
                }
                AtomOp::Exch => a.swap(b32, Relaxed),
                AtomOp::Cas => match a.compare_exchange(b32, c32, Relaxed, Relaxed) {
                    Ok(v) | Err(v) => v,
                },
                AtomOp::And => a.fetch_and(b32, Relaxed),
                AtomOp::Or => a.fetch_or(b32, Relaxed),
                AtomOp::Xor => a.fetch_xor(b32, Relaxed),
                _ => a
                    .fetch_update(Relaxed, Relaxed, |o| {
                        Some(atom_apply(op, t, o as u64, b, c) as u32)
                    })
                    .unwrap_or_else(|v| v),
            }) as u64
        }
        _ => {
            // 16-bit atomics: CAS on the containing aligned word.
            let word = off & !3;
            let shift = ((off & 3) * 8) as u32;
            let a = r.atomic32(word);
            let prev = a
                .fetch_update(Relaxed, Relaxed, |w| {
                    let old = ((w >> shift) & 0xffff) as u64;
                    let new = atom_apply(op, t, old, b, c) as u32 & 0xffff;
                    Some((w & !(0xffff << shift)) | (new << shift))
                })
                .unwrap_or_else(|v| v);
            ((prev >> shift) & 0xffff) as u64
        }
    }
}
