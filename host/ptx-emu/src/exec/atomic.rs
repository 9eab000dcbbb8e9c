//! Atomics (`atom`, `red`): read-modify-writes on global memory through the host's atomic
//! instructions, and on shared and local memory (which only their own CTA or thread can reach)
//! as a plain load and store.
//!
//! Every global atomic acquires and releases, whatever its `.sem` says (`.relaxed`, the default,
//! `.acquire`, `.release`, `.acq_rel`): at least as strong as PTX asks, and on x86 the same
//! instruction as a relaxed one (a locked read-modify-write).

use std::sync::atomic::Ordering::{AcqRel, Acquire};

use crate::exec::mem::{show_addr, Loc};
use crate::exec::ops;
use crate::exec::regs::lanes;
use crate::exec::warp::{trouble, Warp, R};
use crate::exec::{CtaCtx, Launch};
use crate::float;
use crate::ir::*;
use crate::memory::Region;

impl Warp {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn atom(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        op: AtomOp,
        t: AtomTy,
        d: Option<u32>,
        addr: &Addr,
        b: Src,
        c: Src,
        m: u32,
    ) -> R<()> {
        let size = t.bits() as u32 / 8;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if !a.is_multiple_of(size as u64) {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {size}-byte atomic at {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, size, l, true)
                .map_err(|e| trouble(l as u32, e))?;
            let (bv, cv) = (self.v1(b, l), self.v1(c, l));
            let old = match loc {
                Loc::Atomic(r, off) => atomic_global(r, off, size, op, t, bv, cv),
                Loc::Shared(_) | Loc::Local(_) => {
                    let old = self.load(cx, cta, loc, 0, size);
                    let new = atom_apply(op, t, old, bv, cv);
                    self.store(cta, loc, 0, size, new);
                    old
                }
                _ => return Err(trouble(l as u32, "atomic on a parameter address")),
            };
            if let Some(d) = d {
                self.regs[d as usize][l] = old;
            }
        }
        Ok(())
    }
}

/// The value an atomic stores, given the old value.
pub(crate) fn atom_apply(op: AtomOp, t: AtomTy, old: u64, b: u64, c: u64) -> u64 {
    let signed = matches!(t, AtomTy::S32 | AtomTy::S64);
    let w64 = t.bits() == 64;
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
            AtomTy::F16x2 => ops::x2(old, b, 0, |p, q, _| float::add(FT::F16, p, q, Rnd::N)),
            AtomTy::BF16x2 => ops::x2(old, b, 0, |p, q, _| float::add(FT::BF16, p, q, Rnd::N)),
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
                AtomOp::Add if !matches!(t, AtomTy::F64) => a.fetch_add(b, AcqRel),
                AtomOp::Exch => a.swap(b, AcqRel),
                AtomOp::Cas => match a.compare_exchange(b, c, AcqRel, Acquire) {
                    Ok(v) | Err(v) => v,
                },
                _ => a
                    .fetch_update(AcqRel, Acquire, |o| Some(atom_apply(op, t, o, b, c)))
                    .unwrap_or_else(|v| v),
            }
        }
        4 => {
            let a = r.atomic32(off);
            let (b32, c32) = (b as u32, c as u32);
            (match op {
                AtomOp::Add if !matches!(t, AtomTy::F32 | AtomTy::F16x2 | AtomTy::BF16x2) => {
                    a.fetch_add(b32, AcqRel)
                }
                AtomOp::Exch => a.swap(b32, AcqRel),
                AtomOp::Cas => match a.compare_exchange(b32, c32, AcqRel, Acquire) {
                    Ok(v) | Err(v) => v,
                },
                AtomOp::And => a.fetch_and(b32, AcqRel),
                AtomOp::Or => a.fetch_or(b32, AcqRel),
                AtomOp::Xor => a.fetch_xor(b32, AcqRel),
                _ => a
                    .fetch_update(AcqRel, Acquire, |o| {
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
                .fetch_update(AcqRel, Acquire, |w| {
                    let old = ((w >> shift) & 0xffff) as u64;
                    let new = atom_apply(op, t, old, b, c) as u32 & 0xffff;
                    Some((w & !(0xffff << shift)) | (new << shift))
                })
                .unwrap_or_else(|v| v);
            ((prev >> shift) & 0xffff) as u64
        }
    }
}
