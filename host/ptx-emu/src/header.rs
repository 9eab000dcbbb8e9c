//! A module's header: the `.version` and `.target` directives every PTX module begins with, read
//! without lexing the rest of the module.
//!
//! What a device loads depends on both: the ISA version says which drivers can compile the
//! module, the target which devices can run it. [`crate::Module::parse`] accepts a module without
//! them (hand-written snippets run fine on the emulator); a loader that must refuse what a GPU
//! would refuse reads them here first ([`PtxHeader::read`]) and checks the target against its
//! device ([`PtxTarget::runs_on`]).

use std::fmt;

/// The header of a PTX module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxHeader {
    /// `.version major.minor`: the PTX ISA version.
    pub version: (u32, u32),
    /// The architecture of `.target`.
    pub target: PtxTarget,
}

/// An `sm_XY` architecture a module targets, with its variant suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtxTarget {
    /// Compute capability (major, minor): `sm_90a` is (9, 0), `sm_120` is (12, 0).
    pub compute_capability: (u32, u32),
    pub variant: TargetVariant,
}

/// What an `sm_XY` target's suffix restricts it to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetVariant {
    /// `sm_XY`: runs on XY and every later architecture (the driver compiles it for them).
    Portable,
    /// `sm_XYa`: uses features of exactly XY; runs on XY alone.
    ArchSpecific,
    /// `sm_XYf`: uses features of the X family; runs on X.Y and later minors of the same major.
    FamilySpecific,
}

impl PtxTarget {
    /// Whether a device of compute capability `device` can run a module of this target.
    pub fn runs_on(&self, device: (u32, u32)) -> bool {
        let target = self.compute_capability;
        match self.variant {
            TargetVariant::Portable => target <= device,
            TargetVariant::ArchSpecific => target == device,
            TargetVariant::FamilySpecific => target.0 == device.0 && target.1 <= device.1,
        }
    }
}

impl fmt::Display for PtxTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.compute_capability;
        let suffix = match self.variant {
            TargetVariant::Portable => "",
            TargetVariant::ArchSpecific => "a",
            TargetVariant::FamilySpecific => "f",
        };
        write!(f, "sm_{major}{minor}{suffix}")
    }
}

/// Why a module's header cannot be read. Quoted text is cut to 40 bytes, so a message never
/// echoes a module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Nothing but whitespace and comments.
    #[error("the module is empty")]
    Empty,
    #[error("line {line}: the module begins with `{found}`, not `.version`")]
    NoVersion { line: u32, found: String },
    #[error(
        "line {line}: `.version` is followed by {}, not a PTX ISA version (major.minor)",
        shown(found)
    )]
    BadVersion { line: u32, found: String },
    #[error(
        "line {line}: `.version` is followed by {}, not `.target`",
        shown(found)
    )]
    NoTarget { line: u32, found: String },
    #[error(
        "line {line}: `.target` names no sm_XY architecture (it lists {})",
        shown(found)
    )]
    BadTarget { line: u32, found: String },
}

/// A quoted word of the module, or where it ended.
fn shown(found: &str) -> String {
    if found.is_empty() {
        "the end of the module".to_owned()
    } else {
        format!("`{found}`")
    }
}

/// Most bytes of the module quoted in a [`HeaderError`].
const MAX_QUOTED: usize = 40;

impl PtxHeader {
    /// Reads the `.version` and `.target` directives at the start of `ptx` (after any whitespace
    /// and comments). Only the header is looked at, however long the module is.
    pub fn read(ptx: &str) -> Result<PtxHeader, HeaderError> {
        let mut s = Scanner {
            text: ptx.as_bytes(),
            at: 0,
            line: 1,
        };
        let (line, first) = s.word().ok_or(HeaderError::Empty)?;
        if first != ".version" {
            return Err(HeaderError::NoVersion {
                line,
                found: quoted(first),
            });
        }
        let (line, number) = s.word().unwrap_or((line, ""));
        let version = parse_version(number).ok_or_else(|| HeaderError::BadVersion {
            line,
            found: quoted(number),
        })?;
        let (line, next) = s.word().unwrap_or((line, ""));
        if next != ".target" {
            return Err(HeaderError::NoTarget {
                line,
                found: quoted(next),
            });
        }
        // The directive's list runs to the end of its line: `sm_90a, debug`.
        let mut list = Vec::new();
        while let Some(item) = s.word_on_line(line) {
            list.push(item);
        }
        let target = list
            .iter()
            .find_map(|item| parse_target(item))
            .ok_or_else(|| HeaderError::BadTarget {
                line,
                found: quoted(&list.join(", ")),
            })?;
        Ok(PtxHeader { version, target })
    }
}

fn parse_version(s: &str) -> Option<(u32, u32)> {
    let (major, minor) = s.split_once('.')?;
    let digits = |p: &str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(major) || !digits(minor) {
        return None;
    }
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn parse_target(s: &str) -> Option<PtxTarget> {
    let rest = s.strip_prefix("sm_")?;
    let (digits, variant) = match rest.as_bytes().last()? {
        b'a' => (&rest[..rest.len() - 1], TargetVariant::ArchSpecific),
        b'f' => (&rest[..rest.len() - 1], TargetVariant::FamilySpecific),
        _ => (rest, TargetVariant::Portable),
    };
    if digits.len() < 2 || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    Some(PtxTarget {
        compute_capability: (n / 10, n % 10),
        variant,
    })
}

/// `s` cut to [`MAX_QUOTED`] bytes on a char boundary (with `…` when cut), control characters
/// escaped: it goes into messages for people.
fn quoted(s: &str) -> String {
    let mut end = s.len().min(MAX_QUOTED);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < s.len() { "…" } else { "" };
    format!("{}{cut}", s[..end].escape_debug())
}

/// Words of the header: runs of anything but whitespace and commas, with `//` and `/* */`
/// comments skipped.
struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
    line: u32,
}

impl<'a> Scanner<'a> {
    /// Skips whitespace, commas (where `commas`) and comments; stops at a newline when
    /// `stop_at_newline` (and says so by returning false).
    fn skip(&mut self, commas: bool, stop_at_newline: bool) -> bool {
        while let Some(&c) = self.text.get(self.at) {
            match c {
                b'\n' if stop_at_newline => return false,
                b'\n' => {
                    self.line += 1;
                    self.at += 1;
                }
                b' ' | b'\t' | b'\r' | 0x0b | 0x0c => self.at += 1,
                b',' if commas => self.at += 1,
                b'/' if self.text.get(self.at + 1) == Some(&b'/') => {
                    while self.text.get(self.at).is_some_and(|&c| c != b'\n') {
                        self.at += 1;
                    }
                }
                b'/' if self.text.get(self.at + 1) == Some(&b'*') => {
                    self.at += 2;
                    loop {
                        match self.text.get(self.at) {
                            None => return true,
                            Some(b'*') if self.text.get(self.at + 1) == Some(&b'/') => {
                                self.at += 2;
                                break;
                            }
                            Some(b'\n') if stop_at_newline => return false,
                            Some(b'\n') => {
                                self.line += 1;
                                self.at += 1;
                            }
                            Some(_) => self.at += 1,
                        }
                    }
                }
                _ => return true,
            }
        }
        true
    }

    fn take(&mut self) -> Option<&'a str> {
        let start = self.at;
        while let Some(&c) = self.text.get(self.at) {
            let comment = c == b'/' && matches!(self.text.get(self.at + 1), Some(b'/' | b'*'));
            if c.is_ascii_whitespace() || c == b',' || comment {
                break;
            }
            self.at += 1;
        }
        if self.at == start {
            return None;
        }
        // Cut at ASCII bytes only, so the slice is on char boundaries.
        std::str::from_utf8(&self.text[start..self.at]).ok()
    }

    /// The next word anywhere, with its line.
    fn word(&mut self) -> Option<(u32, &'a str)> {
        self.skip(false, false);
        let line = self.line;
        self.take().map(|w| (line, w))
    }

    /// The next word of the list on line `line`, if it has one more.
    fn word_on_line(&mut self, line: u32) -> Option<&'a str> {
        if self.line != line || !self.skip(true, true) {
            return None;
        }
        self.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(cc: (u32, u32), variant: TargetVariant) -> PtxTarget {
        PtxTarget {
            compute_capability: cc,
            variant,
        }
    }

    #[test]
    fn reads_the_header_past_comments() {
        let h = PtxHeader::read(
            "//\n// Generated by NVIDIA NVVM Compiler\n/* a\nblock */ .version 8.7\n.target sm_90a, debug // x\n.address_size 64\n",
        )
        .unwrap();
        assert_eq!(h.version, (8, 7));
        assert_eq!(h.target, target((9, 0), TargetVariant::ArchSpecific));
        assert_eq!(h.target.to_string(), "sm_90a");
        let h = PtxHeader::read(".version 9.0\n.target texmode_independent, sm_120f\n").unwrap();
        assert_eq!(h.target, target((12, 0), TargetVariant::FamilySpecific));
        assert_eq!(
            PtxHeader::read(".version 10.12 .target sm_52").unwrap(),
            PtxHeader {
                version: (10, 12),
                target: target((5, 2), TargetVariant::Portable)
            }
        );
    }

    #[test]
    fn a_module_without_a_header_is_refused_with_where() {
        for empty in ["", "  \n\t", "// nothing\n/* at all */\n"] {
            assert_eq!(PtxHeader::read(empty), Err(HeaderError::Empty), "{empty:?}");
        }
        assert_eq!(
            PtxHeader::read("\n.visible .entry k() { ret; }"),
            Err(HeaderError::NoVersion {
                line: 2,
                found: ".visible".into()
            })
        );
        assert_eq!(
            PtxHeader::read(".version eight\n.target sm_80"),
            Err(HeaderError::BadVersion {
                line: 1,
                found: "eight".into()
            })
        );
        assert_eq!(
            PtxHeader::read(".version 8.0"),
            Err(HeaderError::NoTarget {
                line: 1,
                found: String::new()
            })
        );
        assert_eq!(
            PtxHeader::read(".version 8.0").unwrap_err().to_string(),
            "line 1: `.version` is followed by the end of the module, not `.target`"
        );
        assert_eq!(
            PtxHeader::read(".version 8.0\n.address_size 64"),
            Err(HeaderError::NoTarget {
                line: 2,
                found: ".address_size".into()
            })
        );
        assert_eq!(
            PtxHeader::read(".version 8.0\n.target debug\n.address_size 64"),
            Err(HeaderError::BadTarget {
                line: 2,
                found: "debug".into()
            })
        );
        let long = format!(".version 8.0\n.target {}", "x".repeat(1 << 20));
        let e = PtxHeader::read(&long).unwrap_err().to_string();
        assert!(e.len() < 200, "{e}");
        assert_eq!(
            PtxHeader::read(".version\u{0}8.0").unwrap_err().to_string(),
            "line 1: the module begins with `.version\\08.0`, not `.version`"
        );
    }

    #[test]
    fn targets_run_where_the_driver_would_run_them() {
        let portable = target((8, 0), TargetVariant::Portable);
        assert!(portable.runs_on((8, 0)) && portable.runs_on((9, 0)) && portable.runs_on((12, 0)));
        assert!(!portable.runs_on((7, 5)));
        assert!(!target((8, 6), TargetVariant::Portable).runs_on((8, 0)));
        let arch = target((9, 0), TargetVariant::ArchSpecific);
        assert!(arch.runs_on((9, 0)) && !arch.runs_on((10, 0)) && !arch.runs_on((8, 9)));
        let family = target((10, 0), TargetVariant::FamilySpecific);
        assert!(family.runs_on((10, 0)) && family.runs_on((10, 3)));
        assert!(!family.runs_on((12, 0)) && !family.runs_on((9, 0)));
    }
}
