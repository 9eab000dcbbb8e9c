//! What both backends check of a module before they load it, with one wording of each refusal
//! and its fix: that it has a header at all (an empty module is refused, as the driver refuses
//! it), that its PTX ISA version is one the node's loader compiles, that its target runs on the
//! device, and that no token is longer than [`MAX_TOKEN_BYTES`]. The emulator is checked as the device it emulates (compute capability 8.0, PTX
//! ISA up to [`EMU_ISA`]), so a module the GPU would refuse fails on the emulator the same way.
//! The cuda backend uses the same words where its driver refuses a module for those reasons.

use tasklet_ptx::{HeaderError, PtxHeader, PtxTarget, TargetVariant};

use super::BackendError;
use crate::contract::{quote, ErrorKind};

/// The longest token a module may hold: an identifier, a directive, a register, a number or a
/// string literal, in bytes. Comments and lines may be as long as the module.
///
/// Why a limit at all: the CUDA driver's PTX loader (580.x, on an H100) writes past a heap
/// buffer and aborts the process when an error message it formats quotes a token of about
/// 100,000 bytes or more (a stray word, an undeclared or duplicated name, a `.pragma` string),
/// which would take the worker down as `device-lost` instead of refusing the module. The same
/// loader accepts tokens of a megabyte where they are valid, and quotes ones of 90,000 bytes in
/// its errors without harm. 16 KiB is far past any real name (C++ mangled kernel names of
/// template libraries run to a few KiB) and far below where the driver breaks; both backends
/// refuse a longer token alike.
///
/// Lines are not limited: nvcc writes a global array's whole initializer on one line.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The newest PTX ISA each CUDA release compiles, newest release first: (the release as
/// `cuDriverGetVersion` spells it, its ISA version). From the PTX ISA's release history.
const ISA_OF_CUDA: [(u32, (u32, u32)); 23] = [
    (13010, (9, 1)),
    (13000, (9, 0)),
    (12090, (8, 8)),
    (12080, (8, 7)),
    (12070, (8, 6)),
    (12050, (8, 5)),
    (12040, (8, 4)),
    (12030, (8, 3)),
    (12020, (8, 2)),
    (12010, (8, 1)),
    (12000, (8, 0)),
    (11080, (7, 8)),
    (11070, (7, 7)),
    (11060, (7, 6)),
    (11050, (7, 5)),
    (11040, (7, 4)),
    (11030, (7, 3)),
    (11020, (7, 2)),
    (11010, (7, 1)),
    (11000, (7, 0)),
    (10020, (6, 5)),
    (10010, (6, 4)),
    (10000, (6, 3)),
];

/// What the emulator compiles: the PTX of the newest CUDA release [`ISA_OF_CUDA`] knows, so that
/// whatever a current toolkit or NVRTC writes loads (and what no driver knows yet does not).
pub const EMU_ISA: IsaSupport = IsaSupport {
    newest: ISA_OF_CUDA[0].1,
    cuda: ISA_OF_CUDA[0].0,
};

/// The newest PTX ISA a loader compiles, and the CUDA release that brought it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsaSupport {
    pub newest: (u32, u32),
    /// As `cuDriverGetVersion` spells it (13000 is 13.0).
    pub cuda: u32,
}

impl IsaSupport {
    /// What a driver of CUDA `driver_version` compiles; `None` for one this worker does not know
    /// (older than 10.0, or newer than [`ISA_OF_CUDA`]'s newest): then the driver alone decides.
    pub fn of_driver(driver_version: u32) -> Option<IsaSupport> {
        let newest_known = ISA_OF_CUDA[0].0;
        // A later minor release of the newest known one may compile a newer ISA.
        if driver_version >= newest_known + 10 {
            return None;
        }
        ISA_OF_CUDA
            .iter()
            .find(|(cuda, _)| driver_version >= *cuda)
            .map(|&(cuda, newest)| IsaSupport { newest, cuda })
    }
}

/// What loads modules for a device (its driver, or the emulator standing in for one), as the
/// checks need it.
#[derive(Debug, Clone, Copy)]
pub struct Loader {
    /// The device's compute capability.
    pub compute_capability: (u32, u32),
    /// What it compiles; `None` where that is not known (see [`IsaSupport::of_driver`]).
    pub isa: Option<IsaSupport>,
}

/// Checks `ptx`'s header against `loader`: a `LoadFailed` naming what is wrong and how to fix it,
/// or the header.
pub fn check(ptx: &str, loader: &Loader) -> Result<PtxHeader, BackendError> {
    let header = PtxHeader::read(ptx).map_err(no_header)?;
    if let Some(isa) = loader.isa {
        if header.version > isa.newest {
            return Err(BackendError::new(
                ErrorKind::LoadFailed,
                isa_too_new(header.version, Some(isa.newest), isa.cuda),
            ));
        }
    }
    if !header.target.runs_on(loader.compute_capability) {
        return Err(BackendError::new(
            ErrorKind::LoadFailed,
            target_not_run(&header.target, loader.compute_capability),
        ));
    }
    if let Some(token) = first_token_over(ptx, MAX_TOKEN_BYTES) {
        return Err(BackendError::new(
            ErrorKind::LoadFailed,
            token_too_long(ptx, &token),
        ));
    }
    Ok(header)
}

/// Where a token lies in a module: its byte range and the line it is on (from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Token {
    start: usize,
    end: usize,
    line: u32,
}

/// The first token of `ptx` longer than `max` bytes, if any. A token is what the driver's lexer
/// reads as one and may quote whole in an error: a run of identifier characters (letters, digits,
/// `_`, `$`, `%` and `.`, which covers names, directives, registers and numbers), or a string
/// literal up to its closing quote or the end of its line. Comments are skipped; anything else
/// is punctuation, which the driver quotes a character at a time.
fn first_token_over(ptx: &str, max: usize) -> Option<Token> {
    let bytes = ptx.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.');
    let mut line = 1u32;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        match b {
            b'\n' => {
                line = line.saturating_add(1);
                i += 1;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = memchr(bytes, i, b'\n');
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let end = ptx[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |at| i + 2 + at + 2);
                let lines = bytes[i..end].iter().filter(|&&c| c == b'\n').count();
                line = line.saturating_add(u32::try_from(lines).unwrap_or(u32::MAX));
                i = end;
                continue;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && !matches!(bytes[i], b'"' | b'\n') {
                    // An escaped character, a quote included, is part of the string.
                    let escapes =
                        bytes[i] == b'\\' && bytes.get(i + 1).is_some_and(|&c| c != b'\n');
                    i += if escapes { 2 } else { 1 };
                }
                i = i.min(bytes.len());
                if bytes.get(i) == Some(&b'"') {
                    i += 1;
                }
            }
            _ if word(b) => {
                while i < bytes.len() && word(bytes[i]) {
                    i += 1;
                }
            }
            _ => {
                i += 1;
                continue;
            }
        }
        if i - start > max {
            return Some(Token {
                start,
                end: i,
                line,
            });
        }
    }
    None
}

/// The index of the first `byte` at or after `from` in `bytes`, or its length.
fn memchr(bytes: &[u8], from: usize, byte: u8) -> usize {
    bytes[from..]
        .iter()
        .position(|&b| b == byte)
        .map_or(bytes.len(), |at| from + at)
}

/// Why a module holding `token` does not load, quoting its start alone, and the fix.
fn token_too_long(ptx: &str, token: &Token) -> String {
    let text = &ptx[token.start..token.end];
    format!(
        "PTX line {}: a token is longer than the {MAX_TOKEN_BYTES}-byte limit on one identifier, directive, \
         number or string of a module: {}; shorten it (a kernel's or symbol's name, most likely)",
        token.line,
        quote::name(text)
    )
}

fn no_header(e: HeaderError) -> BackendError {
    let what = match e {
        HeaderError::Empty => "the module is empty".to_owned(),
        other => format!("the module has no PTX header: {other}"),
    };
    BackendError::new(
        ErrorKind::LoadFailed,
        format!(
            "{what}; a PTX module begins with `.version` and `.target` (as nvcc --ptx and NVRTC write them): load the whole PTX text"
        ),
    )
}

/// A CUDA release as people write it: 13000 → "13.0".
pub fn cuda_version(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Why a module of ISA `version` does not load where the driver (or the emulator, which stands
/// for one) compiles PTX ISA up to `newest` (where known) as CUDA release `cuda` does; and the
/// fix.
pub fn isa_too_new(version: (u32, u32), newest: Option<(u32, u32)>, cuda: u32) -> String {
    let (major, minor) = version;
    let cuda = cuda_version(cuda);
    let compiles = match newest {
        Some((newest_major, newest_minor)) => {
            format!("PTX ISA up to {newest_major}.{newest_minor}, as CUDA {cuda}")
        }
        None => format!("CUDA {cuda}"),
    };
    format!(
        "the PTX is ISA version {major}.{minor} (its `.version`), newer than this driver compiles ({compiles}); \
         compile it with a CUDA toolkit or NVRTC of CUDA {cuda} or older (the ISA version is the toolkit's)"
    )
}

/// Why a module targeting `target` does not run on a device of compute capability `device`,
/// and the fix.
pub fn target_not_run(target: &PtxTarget, device: (u32, u32)) -> String {
    let (major, minor) = device;
    let why = match target.variant {
        TargetVariant::ArchSpecific => {
            format!(" (code for {target} runs on that architecture alone)")
        }
        TargetVariant::FamilySpecific => format!(
            " (code for {target} runs on compute capability {}.x alone)",
            target.compute_capability.0
        ),
        TargetVariant::Portable => String::new(),
    };
    format!(
        "the PTX targets {target} (its `.target`), which this device (sm_{major}{minor}) cannot run{why}; compile \
         for sm_{major}{minor} or older: nvcc -arch=compute_{major}{minor} --ptx, or NVRTC's \
         --gpu-architecture=compute_{major}{minor}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100: Loader = Loader {
        compute_capability: (8, 0),
        isa: Some(IsaSupport {
            newest: (9, 0),
            cuda: 13000,
        }),
    };

    fn refused(ptx: &str, loader: &Loader) -> String {
        let e = check(ptx, loader).unwrap_err();
        assert_eq!(e.kind, ErrorKind::LoadFailed, "{e}");
        e.message
    }

    #[test]
    fn a_module_without_a_header_is_refused() {
        for empty in ["", "\n  \n", "// only a comment\n"] {
            let m = refused(empty, &A100);
            assert!(m.starts_with("the module is empty;"), "{m}");
            assert!(m.contains("begins with `.version` and `.target`"), "{m}");
        }
        let m = refused(".visible .entry k() { ret; }", &A100);
        assert!(m.contains("begins with `.visible`, not `.version`"), "{m}");
    }

    #[test]
    fn an_isa_newer_than_the_loader_is_refused_with_the_release_to_use() {
        let m = refused(".version 9.1\n.target sm_80\n", &A100);
        assert_eq!(
            m,
            "the PTX is ISA version 9.1 (its `.version`), newer than this driver compiles (PTX ISA up to 9.0, as \
             CUDA 13.0); compile it with a CUDA toolkit or NVRTC of CUDA 13.0 or older (the ISA version is the \
             toolkit's)"
        );
        assert!(check(".version 9.0\n.target sm_80\n", &A100).is_ok());
        assert!(check(".version 6.0\n.target sm_52\n", &A100).is_ok());
        // An unknown driver decides for itself.
        let unknown = Loader { isa: None, ..A100 };
        assert!(check(".version 99.0\n.target sm_80\n", &unknown).is_ok());
    }

    #[test]
    fn a_target_beyond_the_device_is_refused_with_the_architecture_to_use() {
        let m = refused(".version 8.0\n.target sm_90\n", &A100);
        assert_eq!(
            m,
            "the PTX targets sm_90 (its `.target`), which this device (sm_80) cannot run; compile for sm_80 or \
             older: nvcc -arch=compute_80 --ptx, or NVRTC's --gpu-architecture=compute_80"
        );
        let h100 = Loader {
            compute_capability: (9, 0),
            ..A100
        };
        let m = refused(".version 8.0\n.target sm_80a\n", &h100);
        assert!(m.contains("sm_80a runs on that architecture alone"), "{m}");
        assert!(check(".version 8.0\n.target sm_90a\n", &h100).is_ok());
        assert!(check(".version 8.0\n.target sm_80\n", &h100).is_ok());
    }

    const HEADER: &str = ".version 7.0\n.target sm_80\n.address_size 64\n";

    #[test]
    fn a_token_past_the_limit_is_refused_quoting_its_start() {
        // The module that made the driver abort: one stray word of 100,000 bytes.
        let m = refused(&format!("{HEADER}{}\n", "y".repeat(100_000)), &A100);
        let quoted = format!("`{}…` (100000 bytes)", "y".repeat(quote::NAME_MAX));
        assert_eq!(
            m,
            format!(
                "PTX line 4: a token is longer than the 16384-byte limit on one identifier, directive, number or \
                 string of a module: {quoted}; shorten it (a kernel's or symbol's name, most likely)"
            )
        );
        // Names, registers, directives, numbers and strings alike, at the line they are on.
        let long = "q".repeat(MAX_TOKEN_BYTES);
        for (ptx, line) in [
            (
                format!("{HEADER}.visible .entry k{long}()\n{{\n\tret;\n}}\n"),
                4,
            ),
            (
                format!("{HEADER}.visible .entry k()\n{{\n\t.reg .b32 %{long};\n\tret;\n}}\n"),
                6,
            ),
            (format!("{HEADER}/* two\nlines */ .{long}\n"), 5),
            (format!("{HEADER}\n\tmov.u32 %r, 1{long};\n"), 5),
            (format!("{HEADER}.pragma \"a{long}\";\n"), 4),
            // An unclosed string ends at its line's end.
            (format!("{HEADER}.pragma \"{long}\\\"x\n"), 4),
        ] {
            let m = refused(&ptx, &A100);
            assert!(
                m.starts_with(&format!("PTX line {line}: a token is longer")),
                "{m}"
            );
            assert!(m.len() < 300, "{m}");
        }
    }

    #[test]
    fn tokens_up_to_the_limit_long_comments_and_long_lines_load() {
        let name = format!("k{}", "x".repeat(MAX_TOKEN_BYTES - 1));
        let within = [
            format!("{HEADER}.visible .entry {name}()\n{{\n\tret;\n}}\n"),
            format!("{HEADER}.pragma \"{}\";\n", "s".repeat(MAX_TOKEN_BYTES - 2)),
            // Comments are skipped however long, and a string in one is no string.
            format!(
                "{HEADER}// {}\n/* \" {} */\n",
                "c".repeat(1 << 20),
                "d".repeat(1 << 20)
            ),
            // An initializer on one line, as nvcc writes it: a long line of short tokens.
            format!(
                "{HEADER}.global .align 1 .b8 t[100000] = {{{}}};\n",
                ["1"; 100_000].join(", ")
            ),
            // Punctuation is read a character at a time.
            format!("{HEADER}{}\n", "~".repeat(100_000)),
        ];
        for ptx in &within {
            assert!(check(ptx, &A100).is_ok(), "{}", &ptx[..80]);
        }
        assert_eq!(
            first_token_over(&format!("{HEADER}{name}x"), MAX_TOKEN_BYTES).map(|t| t.line),
            Some(4)
        );
    }

    #[test]
    fn drivers_map_to_the_isa_they_compile() {
        let of = |v| IsaSupport::of_driver(v).map(|i| i.newest);
        assert_eq!(of(12080), Some((8, 7)));
        assert_eq!(of(12060), Some((8, 5)));
        assert_eq!(of(13000), Some((9, 0)));
        assert_eq!(of(13010), Some((9, 1)));
        assert_eq!(of(13020), None);
        assert_eq!(of(9020), None);
        assert_eq!(EMU_ISA.newest, (9, 1));
    }
}
