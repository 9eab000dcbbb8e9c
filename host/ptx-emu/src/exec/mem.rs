//! Memory access: where an address lands (`locate`), plain loads and stores in every state
//! space, and the per-thread parameter area that calls pass arguments through. Every access is
//! resolved to a `Loc` only after its full extent has been checked against the space it lands in.

use crate::exec::ops;
use crate::exec::regs::lanes;
use crate::exec::warp::{trouble, Warp, R};
use crate::exec::{CtaCtx, Launch};
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

    /// The common 4-byte shared load. Returns false (having done nothing) if any lane's access
    /// is misaligned or out of range, so the general path can report it.
    #[inline(always)]
    pub(super) fn ld_shared32(&mut self, cta: &CtaCtx<'_>, d: u32, addr: &Addr, m: u32) -> bool {
        let sh: &[u8] = cta.shared;
        let mut o = [0u64; 32];
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a & 3 != 0 {
                return false;
            }
            match sh.get(a as usize..).and_then(|s| s.get(..4)) {
                Some(b) => o[l] = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64,
                None => return false,
            }
        }
        self.w(d, &o, m);
        true
    }

    #[inline(always)]
    pub(super) fn st_shared32(
        &mut self,
        cta: &mut CtaCtx<'_>,
        s: Src,
        addr: &Addr,
        m: u32,
    ) -> bool {
        let len = cta.shared.len() as u64;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if a & 3 != 0 || a >= len || len - a < 4 {
                return false;
            }
        }
        for l in lanes(m) {
            let a = self.addr(addr, l) as usize;
            let v = self.v1(s, l) as u32;
            if let Some(b) = cta.shared.get_mut(a..a + 4) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        true
    }

    pub(super) fn tparam_copy(&mut self, cp: &Copy3, m: u32) -> R<()> {
        let sz = self.tparam_size;
        let from = (cp.from as u64).wrapping_sub(TPARAM_FLAG) as usize;
        let to = (cp.to as u64).wrapping_sub(TPARAM_FLAG) as usize;
        let len = cp.len as usize;
        if from + len > sz || to + len > sz {
            return Err(trouble(
                m.trailing_zeros(),
                "call parameter outside the parameter area",
            ));
        }
        for l in lanes(m) {
            let base = l * sz;
            self.tparam
                .copy_within(base + from..base + from + len, base + to);
        }
        Ok(())
    }

    /// Lane `l`'s `size` bytes at `at` in its parameter area; 0 where that is out of range.
    pub(crate) fn tparam_read(&self, l: usize, at: u32, size: u32) -> u64 {
        let off = (at as u64).wrapping_sub(TPARAM_FLAG) as usize;
        le_read(&self.tparam, l * self.tparam_size + off, size)
    }

    pub(crate) fn tparam_write(
        &mut self,
        l: usize,
        at: u32,
        size: usize,
        v: u64,
    ) -> Result<(), String> {
        let off = (at as u64).wrapping_sub(TPARAM_FLAG) as usize;
        if off + size > self.tparam_size {
            return Err("parameter write out of range".into());
        }
        let base = l * self.tparam_size + off;
        if let Some(dst) = self.tparam.get_mut(base..base + size) {
            dst.copy_from_slice(&v.to_le_bytes()[..size]);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    pub(super) fn ld(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        size: u8,
        sign: bool,
        n: u8,
        d: &[Option<u32>; 4],
        addr: &Addr,
        m: u32,
    ) -> R<()> {
        let total = size as u32 * n as u32;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if !a.is_multiple_of(total as u64) {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {total}-byte load from {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, total, l, false)
                .map_err(|e| trouble(l as u32, e))?;
            for k in 0..n as usize {
                let v = self.load(cx, cta, loc, k as u64 * size as u64, size as u32);
                let v = if sign {
                    ops::sext(v, size * 8) as u64
                } else {
                    v
                };
                if let Some(r) = d[k] {
                    self.regs[r as usize][l] = v;
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    pub(super) fn st(
        &mut self,
        cx: &Launch<'_>,
        cta: &mut CtaCtx<'_>,
        sp: Space,
        size: u8,
        n: u8,
        s: &[Src; 4],
        addr: &Addr,
        m: u32,
    ) -> R<()> {
        let total = size as u32 * n as u32;
        for l in lanes(m) {
            let a = self.addr(addr, l);
            if !a.is_multiple_of(total as u64) {
                return Err(trouble(
                    l as u32,
                    format!("misaligned {total}-byte store to {}", show_addr(sp, a)),
                ));
            }
            let loc = self
                .locate(cx, cta, sp, a, total, l, true)
                .map_err(|e| trouble(l as u32, e))?;
            for k in 0..n as usize {
                let v = self.v1(s[k], l);
                self.store(cta, loc, k as u64 * size as u64, size as u32, v);
            }
        }
        Ok(())
    }

    #[inline(always)]
    pub(crate) fn load(
        &self,
        cx: &Launch<'_>,
        cta: &CtaCtx<'_>,
        loc: Loc<'_>,
        k: u64,
        size: u32,
    ) -> u64 {
        match loc {
            Loc::Atomic(r, off) => r.load(off + k, size),
            Loc::Shared(o) => le_read(cta.shared, o + k as usize, size),
            Loc::Local(o) => le_read(&self.local, o + k as usize, size),
            Loc::TParam(o) => le_read(&self.tparam, o + k as usize, size),
            Loc::Args(o) => le_read(cx.args, o + k as usize, size),
        }
    }

    #[inline(always)]
    pub(super) fn store(&mut self, cta: &mut CtaCtx<'_>, loc: Loc<'_>, k: u64, size: u32, v: u64) {
        match loc {
            Loc::Atomic(r, off) => r.store(off + k, size, v),
            Loc::Shared(o) => le_write(cta.shared, o + k as usize, size, v),
            Loc::Local(o) => le_write(&mut self.local, o + k as usize, size, v),
            Loc::TParam(o) => le_write(&mut self.tparam, o + k as usize, size, v),
            // Rejected by `locate` for writes.
            Loc::Args(_) => {}
        }
    }
}

pub(crate) fn show_addr(sp: Space, a: u64) -> String {
    match sp {
        Space::Generic | Space::Global | Space::Const => format!("address {a:#x}"),
        Space::Shared => format!("shared offset {a:#x}"),
        Space::Local => format!("local offset {a:#x}"),
        Space::Param => format!("param offset {a:#x}"),
    }
}

#[inline(always)]
fn le_read(buf: &[u8], o: usize, size: u32) -> u64 {
    match buf.get(o..o + size as usize) {
        Some(b) => {
            let mut w = [0u8; 8];
            w[..size as usize].copy_from_slice(b);
            u64::from_le_bytes(w)
        }
        None => 0,
    }
}

#[inline(always)]
fn le_write(buf: &mut [u8], o: usize, size: u32, v: u64) {
    if let Some(b) = buf.get_mut(o..o + size as usize) {
        b.copy_from_slice(&v.to_le_bytes()[..size as usize]);
    }
}
