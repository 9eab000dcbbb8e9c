//! PTX tokens. Opcodes with their modifiers (`ld.global.nc.v4.u32`), directives (`.reg`) and
//! special registers (`%tid.x`) each lex as one word: dots never separate tokens in PTX, so
//! splitting them later is simpler than reassembling them here.

use crate::load_error as err;
use crate::LoadError;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tok<'a> {
    Word(&'a str),
    /// An integer literal's value (two's complement when it came from a large unsigned literal).
    Int(u64),
    /// `0fXXXXXXXX`: the bits of an f32.
    F32(u32),
    /// `0dXXXXXXXXXXXXXXXX`: the bits of an f64.
    F64(u64),
    /// A decimal floating literal such as `1.5e3`.
    Float(f64),
    Str(&'a str),
    Punct(char),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Token<'a> {
    pub tok: Tok<'a>,
    pub line: u32,
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.')
}

pub(crate) fn lex(src: &str) -> Result<Vec<Token<'_>>, LoadError> {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(src.len() / 4);
    let mut i = 0usize;
    let mut line = 1u32;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' | 0x0b | 0x0c => i += 1,
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let start = line;
                i += 2;
                loop {
                    match b.get(i) {
                        None => return Err(err(start, "unterminated /* comment")),
                        Some(b'*') if b.get(i + 1) == Some(&b'/') => {
                            i += 2;
                            break;
                        }
                        Some(b'\n') => {
                            line += 1;
                            i += 1;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\n' {
                        return Err(err(line, "unterminated string literal"));
                    }
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if i >= b.len() {
                    return Err(err(line, "unterminated string literal"));
                }
                out.push(Token {
                    tok: Tok::Str(&src[start..i]),
                    line,
                });
                i += 1;
            }
            c if c.is_ascii_digit() => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_')
                {
                    // An exponent sign belongs to a decimal float literal.
                    if (b[i] == b'e' || b[i] == b'E')
                        && matches!(b.get(i + 1), Some(b'+' | b'-'))
                        && !src[start..i].starts_with("0x")
                        && !src[start..i].starts_with("0X")
                    {
                        i += 1;
                    }
                    i += 1;
                }
                let text = &src[start..i];
                out.push(Token {
                    tok: number(text, line)?,
                    line,
                });
            }
            c if is_word_start(c) => {
                let start = i;
                i += 1;
                loop {
                    match b.get(i) {
                        Some(&c) if is_word_char(c) => i += 1,
                        // `L1::no_allocate` style cache hints are part of an opcode.
                        Some(b':') if b.get(i + 1) == Some(&b':') => i += 2,
                        _ => break,
                    }
                }
                out.push(Token {
                    tok: Tok::Word(&src[start..i]),
                    line,
                });
            }
            b',' | b';' | b':' | b'{' | b'}' | b'[' | b']' | b'(' | b')' | b'<' | b'>' | b'+'
            | b'-' | b'@' | b'!' | b'|' | b'=' | b'*' => {
                out.push(Token {
                    tok: Tok::Punct(c as char),
                    line,
                });
                i += 1;
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(err(line, format!("unexpected character {ch:?}")));
            }
        }
    }
    Ok(out)
}

fn number(text: &str, line: u32) -> Result<Tok<'static>, LoadError> {
    let bad = || err(line, format!("malformed number `{text}`"));
    let lower = text.to_ascii_lowercase();
    if let Some(h) = lower.strip_prefix("0f") {
        if h.len() == 8 {
            return u32::from_str_radix(h, 16).map(Tok::F32).map_err(|_| bad());
        }
        return Err(bad());
    }
    if let Some(h) = lower.strip_prefix("0d") {
        if h.len() == 16 {
            return u64::from_str_radix(h, 16).map(Tok::F64).map_err(|_| bad());
        }
        return Err(bad());
    }
    let t = lower.strip_suffix('u').unwrap_or(&lower);
    if let Some(h) = t.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).map(Tok::Int).map_err(|_| bad());
    }
    if let Some(h) = t.strip_prefix("0b") {
        return u64::from_str_radix(h, 2).map(Tok::Int).map_err(|_| bad());
    }
    if t.contains('.') || (t.contains('e') && !t.starts_with("0x")) {
        return lower.parse::<f64>().map(Tok::Float).map_err(|_| bad());
    }
    if t.len() > 1 && t.starts_with('0') {
        return u64::from_str_radix(&t[1..], 8)
            .map(Tok::Int)
            .map_err(|_| bad());
    }
    t.parse::<u64>().map(Tok::Int).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_numbers_and_lines() {
        let t = lex("ld.global.nc.L1::no_allocate.v4.u32 {%r1}, [%rd2+-4];\n// c\nmov.f32 %f1, 0f3F800000; 0d3FF0000000000000 17 0x10U 010 1.5")
            .unwrap();
        let toks: Vec<_> = t.iter().map(|t| t.tok).collect();
        assert_eq!(toks[0], Tok::Word("ld.global.nc.L1::no_allocate.v4.u32"));
        assert!(toks.contains(&Tok::F32(0x3F80_0000)));
        assert!(toks.contains(&Tok::F64(0x3FF0_0000_0000_0000)));
        assert!(toks.contains(&Tok::Int(17)));
        assert!(toks.contains(&Tok::Int(16)));
        assert!(toks.contains(&Tok::Int(8)));
        assert!(toks.contains(&Tok::Float(1.5)));
        assert_eq!(t.last().unwrap().line, 3);
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(lex("mov\n 0f12;").unwrap_err().line, 2);
        assert!(lex("/* x").is_err());
        assert!(lex("\"abc").is_err());
        assert!(lex("a # b").is_err());
        assert!(lex("99999999999999999999999").is_err());
    }
}
