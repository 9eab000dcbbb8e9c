//! Calls and their parameter copies, `trap`, `nanosleep`, and the `vprintf`/`__assertfail`
//! built-ins. (Branches, returns and `exit` only name where lanes go next; `Warp::apply` moves
//! them.)

use std::time::Duration;

use crate::exec::printf;
use crate::exec::regs::lanes;
use crate::exec::warp::{trouble, Flow, Warp, R};
use crate::exec::{CtaCtx, Launch};
use crate::ir::*;

/// The longest one `nanosleep` sleeps, as on a GPU (PTX caps the delay at 1 ms).
pub(crate) const MAX_NANOSLEEP: Duration = Duration::from_millis(1);

impl Warp {
    #[inline]
    pub(super) fn call(&mut self, target: u32, args: &[Copy3], m: u32) -> R<Flow> {
        if m != 0 {
            for cp in args.iter() {
                self.tparam_copy(cp, m)?;
            }
        }
        Ok(Flow::Call(m, target))
    }

    #[inline]
    pub(super) fn call_ret(&mut self, rets: &[Copy3], m: u32) -> R<()> {
        for cp in rets.iter() {
            self.tparam_copy(cp, m)?;
        }
        Ok(())
    }

    /// `nanosleep`: the OS thread running the warp's CTA sleeps for the longest delay its active
    /// lanes ask, at most [`MAX_NANOSLEEP`], so that a kernel polling memory with a sleep between
    /// polls (a persistent kernel waiting for its host) does not keep a core busy. The OS may
    /// sleep longer than asked (tens of microseconds for a short delay); a delay of 0 yields the
    /// core instead. The instruction counts as one step per lane, as every instruction does.
    pub(super) fn nanosleep(&self, t: Src, m: u32) {
        let Some(ns) = lanes(m).map(|l| self.v1(t, l) as u32).max() else {
            return;
        };
        if ns == 0 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_nanos(ns as u64).min(MAX_NANOSLEEP));
        }
    }

    #[inline]
    pub(super) fn trap(&self, m: u32) -> R<()> {
        if m != 0 {
            return Err(trouble(m.trailing_zeros(), "trap instruction executed"));
        }
        Ok(())
    }

    #[inline]
    pub(super) fn vprintf(
        &mut self,
        cx: &Launch<'_>,
        cta: &CtaCtx<'_>,
        ret: Option<u32>,
        fmt: u32,
        args: u32,
        m: u32,
    ) -> R<()> {
        for l in lanes(m) {
            let n = printf::vprintf(self, cx, cta, l, fmt, args)?;
            if let Some(r) = ret {
                self.tparam_write(l, r, 4, n as u64)
                    .map_err(|e| trouble(l as u32, e))?;
            }
        }
        Ok(())
    }

    #[inline]
    pub(super) fn assert_fail(
        &mut self,
        cx: &Launch<'_>,
        cta: &CtaCtx<'_>,
        args: u32,
        m: u32,
    ) -> R<()> {
        if m != 0 {
            let l = m.trailing_zeros() as usize;
            let msg = printf::assert_message(self, cx, cta, l, args);
            return Err(trouble(l as u32, msg));
        }
        Ok(())
    }
}
