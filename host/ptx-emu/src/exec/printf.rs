//! The device `printf` (`vprintf`) and `__assertfail` shims, and the launch's printf buffer.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::exec::warp::{Trouble, Warp};
use crate::exec::{CtaCtx, Launch};
use crate::ir::*;

const MAX_STR: usize = 4096;

/// One launch's printf buffer: how many bytes it may still print. Like the device's buffer, it
/// holds whole calls: a call whose output does not fit prints nothing, and neither does any call
/// after it, so what gets out is what was printed first.
pub(crate) struct Buffer {
    capacity: u64,
    left: AtomicU64,
    dropped_calls: AtomicU64,
    dropped_bytes: AtomicU64,
}

impl Buffer {
    pub(crate) fn new(capacity: u64) -> Buffer {
        Buffer {
            capacity,
            left: AtomicU64::new(capacity),
            dropped_calls: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
        }
    }

    /// Takes `n` bytes of the buffer for one call's output; false (and counted as dropped) when
    /// they do not fit, which also closes the buffer to every later call.
    fn admit(&self, n: usize) -> bool {
        let n = n as u64;
        let taken = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            });
        if taken.is_err() {
            self.left.store(0, Ordering::Relaxed);
            self.dropped_calls.fetch_add(1, Ordering::Relaxed);
            self.dropped_bytes.fetch_add(n, Ordering::Relaxed);
        }
        taken.is_ok()
    }

    /// Whether a call that has formatted `n` bytes so far can still fit: formatting stops past
    /// it, so one call never builds more than about one buffer's worth of text.
    fn may_grow_to(&self, n: usize) -> bool {
        (n as u64) <= self.capacity
    }

    /// At the end of the launch: says on stderr what did not fit, if anything; returns the bytes
    /// dropped.
    pub(crate) fn report_truncation(&self) -> u64 {
        let calls = self.dropped_calls.load(Ordering::Relaxed);
        let bytes = self.dropped_bytes.load(Ordering::Relaxed);
        if calls > 0 {
            let mut e = std::io::stderr().lock();
            let _ = writeln!(
                e,
                "[printf output truncated: this launch filled its {}-byte printf buffer; {calls} later printf call(s), \
                 {bytes} bytes, were dropped]",
                self.capacity
            );
            let _ = e.flush();
        }
        bytes
    }
}

fn read(
    w: &mut Warp,
    cx: &Launch<'_>,
    cta: &CtaCtx<'_>,
    l: usize,
    addr: u64,
    size: u32,
) -> Result<u64, String> {
    let loc = w.locate(cx, cta, Space::Generic, addr, size, l, false)?;
    Ok(w.load(cx, cta, loc, 0, size))
}

fn read_str(
    w: &mut Warp,
    cx: &Launch<'_>,
    cta: &CtaCtx<'_>,
    l: usize,
    addr: u64,
) -> Result<String, String> {
    let mut bytes = Vec::new();
    for i in 0..MAX_STR as u64 {
        let b = read(w, cx, cta, l, addr.wrapping_add(i), 1)? as u8;
        if b == 0 {
            break;
        }
        bytes.push(b);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Formats and prints one lane's `printf`; returns the number of bytes written.
pub(crate) fn vprintf(
    w: &mut Warp,
    cx: &Launch<'_>,
    cta: &CtaCtx<'_>,
    l: usize,
    fmt: u32,
    args: u32,
) -> Result<usize, Trouble> {
    let t = |e: String| Trouble {
        lane: l as u32,
        msg: format!("printf: {e}"),
    };
    let fmt_addr = w.tparam_read(l, fmt, 8);
    let mut argp = w.tparam_read(l, args, 8);
    let f = read_str(w, cx, cta, l, fmt_addr).map_err(t)?;
    let mut out = String::new();
    let mut it = f.chars().peekable();
    while let Some(ch) = it.next() {
        if !cx.printf.may_grow_to(out.len()) {
            // It cannot fit any more: stop building it (it is dropped whole below).
            break;
        }
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let mut spec = String::from("%");
        let conv = loop {
            match it.next() {
                Some(c) if "diouxXfFeEgGaAcspn%".contains(c) => break c,
                Some(c) => spec.push(c),
                None => break '\0',
            }
        };
        let long = spec.contains('l');
        let flags: String = spec
            .chars()
            .skip(1)
            .filter(|c| !matches!(c, 'l' | 'h' | 'z' | 'j' | 't'))
            .collect();
        let (left, zero, plus, rest) = parse_flags(&flags);
        let (width, prec) = parse_width_prec(&rest);
        let mut take = |size: u32| -> Result<u64, Trouble> {
            argp = argp.div_ceil(size as u64) * size as u64;
            let v = read(w, cx, cta, l, argp, size).map_err(t)?;
            argp += size as u64;
            Ok(v)
        };
        let body = match conv {
            '%' => "%".to_string(),
            '\0' => spec.clone(),
            'd' | 'i' => {
                let v = if long {
                    take(8)? as i64
                } else {
                    take(4)? as u32 as i32 as i64
                };
                let s = v.abs().to_string();
                let s = if let Some(p) = prec {
                    format!("{s:0>p$}")
                } else {
                    s
                };
                if v < 0 {
                    format!("-{s}")
                } else if plus {
                    format!("+{s}")
                } else {
                    s
                }
            }
            'u' | 'x' | 'X' | 'o' => {
                let v = if long {
                    take(8)?
                } else {
                    take(4)? & 0xffff_ffff
                };
                let s = match conv {
                    'u' => v.to_string(),
                    'x' => format!("{v:x}"),
                    'X' => format!("{v:X}"),
                    _ => format!("{v:o}"),
                };
                if let Some(p) = prec {
                    format!("{s:0>p$}")
                } else {
                    s
                }
            }
            'c' => ((take(4)? as u8) as char).to_string(),
            'p' => format!("0x{:x}", take(8)?),
            's' => {
                let p = take(8)?;
                let s = read_str(w, cx, cta, l, p).map_err(t)?;
                match prec {
                    Some(n) => s.chars().take(n).collect(),
                    None => s,
                }
            }
            'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' => {
                let v = f64::from_bits(take(8)?);
                let p = prec.unwrap_or(6);
                let s = match conv {
                    'f' | 'F' => format!("{:.*}", p, v.abs()),
                    'e' | 'E' => c_exp(v.abs(), p, conv == 'E'),
                    _ => format!("{}", v.abs()),
                };
                let s = if v.is_nan() {
                    "nan".to_string()
                } else if v.is_infinite() {
                    "inf".to_string()
                } else {
                    s
                };
                if v.is_sign_negative() && !v.is_nan() {
                    format!("-{s}")
                } else if plus {
                    format!("+{s}")
                } else {
                    s
                }
            }
            _ => String::new(),
        };
        let padded = match width {
            Some(wd) if body.len() < wd => {
                if left {
                    format!("{body:<wd$}")
                } else if zero && conv != 's' {
                    let (sign, digits) = if body.starts_with('-') || body.starts_with('+') {
                        body.split_at(1)
                    } else {
                        ("", body.as_str())
                    };
                    format!("{sign}{digits:0>n$}", n = wd - sign.len())
                } else {
                    format!("{body:>wd$}")
                }
            }
            _ => body,
        };
        out.push_str(&padded);
    }
    if cx.printf.admit(out.len()) {
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(out.as_bytes());
        let _ = e.flush();
    }
    Ok(out.len())
}

fn parse_flags(s: &str) -> (bool, bool, bool, String) {
    let mut left = false;
    let mut zero = false;
    let mut plus = false;
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() && matches!(b[i], b'-' | b'0' | b'+' | b' ' | b'#') {
        match b[i] {
            b'-' => left = true,
            b'0' => zero = true,
            b'+' => plus = true,
            _ => {}
        }
        i += 1;
    }
    (left, zero, plus, s[i..].to_string())
}

/// A conversion's width and precision, each at most the printf buffer's size (a wider field
/// could never be printed, and must not be built).
fn parse_width_prec(s: &str) -> (Option<usize>, Option<usize>) {
    const MOST: usize = crate::PRINTF_BUFFER_BYTES as usize;
    let mut parts = s.splitn(2, '.');
    let w = parts
        .next()
        .and_then(|x| x.parse::<usize>().ok())
        .map(|w| w.min(MOST));
    let p = parts.next().map(|x| match x.parse::<usize>() {
        Ok(p) => p.min(MOST),
        // Digits past what a usize holds; anything else (`%.f`) means 0.
        Err(_) if !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit()) => MOST,
        Err(_) => 0,
    });
    (w, p)
}

fn c_exp(v: f64, p: usize, upper: bool) -> String {
    let s = format!("{:.*e}", p, v);
    // Rust prints `1.5e3`; C prints `1.5e+03`.
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let ev: i32 = e.parse().unwrap_or(0);
    let out = format!("{m}e{}{:02}", if ev < 0 { '-' } else { '+' }, ev.abs());
    if upper {
        out.to_uppercase()
    } else {
        out
    }
}

/// `__assertfail(message, file, line, function, charSize)`.
pub(crate) fn assert_message(
    w: &mut Warp,
    cx: &Launch<'_>,
    cta: &CtaCtx<'_>,
    l: usize,
    args: u32,
) -> String {
    let msg_p = w.tparam_read(l, args, 8);
    let file_p = w.tparam_read(l, args + 8, 8);
    let line = w.tparam_read(l, args + 16, 8) as u32;
    let func_p = w.tparam_read(l, args + 24, 8);
    let msg = read_str(w, cx, cta, l, msg_p).unwrap_or_else(|_| "?".into());
    let file = read_str(w, cx, cta, l, file_p).unwrap_or_else(|_| "?".into());
    let func = read_str(w, cx, cta, l, func_p).unwrap_or_else(|_| "?".into());
    format!("device assertion `{msg}` failed in {func} ({file}:{line})")
}

#[cfg(test)]
mod tests {
    use crate::{DeviceMemory, LaunchParams, Module, PRINTF_BUFFER_BYTES};
    use std::process::Command;

    /// 63 characters and a newline.
    const LINE: &str = "printf line: 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN\n";

    /// `chatter(reps)`: every thread prints [`LINE`] `reps` times.
    fn chatter() -> Module {
        assert_eq!(LINE.len(), 64);
        let bytes: Vec<String> = LINE.bytes().chain([0]).map(|b| b.to_string()).collect();
        let ptx = format!(
            ".version 8.0\n.target sm_80\n.address_size 64\n\
             .extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);\n\
             .global .align 1 .b8 line[65] = {{{}}};\n\
             .visible .entry chatter(.param .u32 reps)\n{{\n\
             .reg .pred %p<2>;\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n\
             ld.param.u32 %r1, [reps];\nmov.u32 %r2, 0;\n\
             mov.u64 %rd1, line;\ncvta.global.u64 %rd2, %rd1;\nmov.u64 %rd3, 0;\n\
             $L_loop:\nsetp.ge.u32 %p1, %r2, %r1;\n@%p1 bra $L_done;\n\
             {{\n.param .b64 param0;\nst.param.b64 [param0+0], %rd2;\n.param .b64 param1;\n\
             st.param.b64 [param1+0], %rd3;\n.param .b32 retval0;\n\
             call.uni (retval0), vprintf, (param0, param1);\n}}\n\
             add.u32 %r2, %r2, 1;\nbra $L_loop;\n$L_done:\nret;\n}}\n",
            bytes.join(", ")
        );
        Module::parse(&ptx).unwrap()
    }

    fn run(m: &Module, threads: u32, reps: u32) -> u64 {
        let params = LaunchParams {
            grid: [1, 1, 1],
            block: [threads, 1, 1],
            shared_mem_bytes: 0,
            args: &reps.to_le_bytes(),
            step_limit: u64::MAX,
            threads: 1,
        };
        m.launch("chatter", &DeviceMemory::new(), &params)
            .unwrap()
            .printf_dropped
    }

    /// Run in a child process of this test binary (printf writes straight to stderr, which the
    /// test harness does not capture): a launch printing 2 MiB, one printing 1 KiB, then 2 MiB
    /// again.
    fn child() {
        let m = chatter();
        assert_eq!(run(&m, 64, 512), PRINTF_BUFFER_BYTES);
        assert_eq!(run(&m, 4, 4), 0);
        assert_eq!(run(&m, 64, 512), PRINTF_BUFFER_BYTES);
    }

    #[test]
    fn printf_output_is_capped_per_launch_and_the_truncation_is_said() {
        const CHILD: &str = "TASKLET_PTX_PRINTF_CHILD";
        if std::env::var_os(CHILD).is_some() {
            return child();
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "exec::printf::tests::printf_output_is_capped_per_launch_and_the_truncation_is_said",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        let lines = err.lines().filter(|l| format!("{l}\n") == LINE).count() as u64;
        let per_full_launch = PRINTF_BUFFER_BYTES / LINE.len() as u64;
        assert_eq!(lines, 2 * per_full_launch + 16, "lines printed");
        let notices: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("[printf output truncated"))
            .collect();
        assert_eq!(notices.len(), 2, "{notices:?}");
        assert!(
            notices[0].contains("its 1048576-byte printf buffer")
                && notices[0].contains("16384 later printf call(s), 1048576 bytes, were dropped"),
            "{}",
            notices[0]
        );
    }

    #[test]
    fn a_huge_field_width_is_bounded_by_the_buffer() {
        assert_eq!(
            super::parse_width_prec("99999999999.99999999999999999999999"),
            (
                Some(PRINTF_BUFFER_BYTES as usize),
                Some(PRINTF_BUFFER_BYTES as usize)
            )
        );
        assert_eq!(super::parse_width_prec("8.3"), (Some(8), Some(3)));
        assert_eq!(super::parse_width_prec("."), (None, Some(0)));
    }
}
