//! The device `printf` (`vprintf`) and `__assertfail` shims.

use std::io::Write;

use crate::exec::warp::{Trouble, Warp};
use crate::exec::{CtaCtx, Launch};
use crate::ir::*;

const MAX_STR: usize = 4096;

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
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(out.as_bytes());
    let _ = e.flush();
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

fn parse_width_prec(s: &str) -> (Option<usize>, Option<usize>) {
    let mut parts = s.splitn(2, '.');
    let w = parts.next().and_then(|x| x.parse().ok());
    let p = parts.next().map(|x| x.parse().unwrap_or(0));
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
