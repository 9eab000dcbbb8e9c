//! What a run asks of the device it is placed on, parsed from `--requires`.
//!
//! ```text
//! requirement := "gpu" [ (":" | ",") constraint { "," constraint } ]
//! constraint  := "vram=" SIZE            free VRAM on one device, at least SIZE (8GiB, 512MiB)
//!              | "cc>=" MAJOR "." MINOR  compute capability at least this (9.0)
//!              | "backend=" NAME         this backend only (cuda: real hardware; emu)
//! ```
//!
//! Without `backend=`, any device satisfies `gpu`, the emulator included.

use std::fmt;
use std::str::FromStr;

use super::size::{format_size, parse_size};
use crate::record::{ComputeCapability, DeviceRecord};

/// Longest requirement text accepted: far more than any real one, a bound on what an error
/// quotes.
const MAX_TEXT: usize = 256;

/// A parsed requirement. The default asks for any device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// Free VRAM needed on one device, in bytes; 0 for any.
    pub min_free_vram: u64,
    /// The lowest compute capability accepted.
    pub min_compute_capability: Option<ComputeCapability>,
    /// The one backend accepted (`cuda`, `emu`).
    pub backend: Option<String>,
}

impl Requirement {
    /// Any GPU: what `gpu` alone means.
    pub fn any_gpu() -> Requirement {
        Requirement::default()
    }

    /// Whether `device` meets every constraint.
    pub fn fits(&self, device: &DeviceRecord) -> bool {
        device.free_vram >= self.min_free_vram
            && self
                .min_compute_capability
                .is_none_or(|cc| device.compute_capability >= cc)
            && self
                .backend
                .as_deref()
                .is_none_or(|backend| device.backend == backend)
    }
}

/// The canonical spelling, which [`Requirement::from_str`] reads back.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("gpu")?;
        let mut separator = ':';
        let mut constraint = |f: &mut fmt::Formatter<'_>, text: fmt::Arguments| {
            let result = write!(f, "{separator}{text}");
            separator = ',';
            result
        };
        if self.min_free_vram != 0 {
            constraint(f, format_args!("vram={}", format_size(self.min_free_vram)))?;
        }
        if let Some(cc) = self.min_compute_capability {
            constraint(f, format_args!("cc>={cc}"))?;
        }
        if let Some(backend) = &self.backend {
            constraint(f, format_args!("backend={backend}"))?;
        }
        Ok(())
    }
}

/// A requirement that does not parse, with what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid requirement {text:?}: {problem}; write gpu[:vram=8GiB][,cc>=9.0][,backend=cuda], quoted for the shell ('gpu:cc>=9.0': unquoted, `>` redirects)")]
pub struct RequirementError {
    /// The text given (cut at 80 characters).
    pub text: String,
    pub problem: String,
}

impl FromStr for Requirement {
    type Err = RequirementError;

    fn from_str(text: &str) -> Result<Requirement, RequirementError> {
        let fail = |problem: String| RequirementError {
            text: text.chars().take(80).collect(),
            problem,
        };
        if text.len() > MAX_TEXT {
            return Err(fail(format!("it is longer than {MAX_TEXT} characters")));
        }
        let text = text.trim();
        let rest = match text.get(..3) {
            Some(kind) if kind.eq_ignore_ascii_case("gpu") => text[3..].trim_start(),
            _ => return Err(fail("it must start with `gpu`".into())),
        };
        let mut requirement = Requirement::default();
        let constraints = match rest.chars().next() {
            None => return Ok(requirement),
            Some(':' | ',') => &rest[1..],
            Some(_) => return Err(fail("`gpu` must be followed by `:` and constraints".into())),
        };
        let (mut vram, mut cc, mut backend) = (false, false, false);
        for constraint in constraints.split(',') {
            let constraint = constraint.trim();
            let duplicate = |key: &str| fail(format!("`{key}` is given twice"));
            if let Some(size) = strip_key(constraint, "vram", "=") {
                if std::mem::replace(&mut vram, true) {
                    return Err(duplicate("vram"));
                }
                requirement.min_free_vram = parse_size(size)
                    .map_err(|e| fail(format!("vram size {size:?}: {}", e.explain())))?;
            } else if let Some(value) = strip_key(constraint, "cc", ">=") {
                if std::mem::replace(&mut cc, true) {
                    return Err(duplicate("cc"));
                }
                let parsed = value.parse().map_err(|e| fail(format!("{e}")))?;
                requirement.min_compute_capability = Some(parsed);
            } else if let Some(name) = strip_key(constraint, "backend", "=") {
                if std::mem::replace(&mut backend, true) {
                    return Err(duplicate("backend"));
                }
                // Backend names are lowercase; `Emu` means the same as `emu`.
                let name = name.to_ascii_lowercase();
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                {
                    return Err(fail(format!(
                        "backend {name:?} is not a backend name (cuda, emu)"
                    )));
                }
                requirement.backend = Some(name);
            } else if constraint.is_empty() {
                return Err(fail(
                    "a constraint is empty (two commas, or one at the end)".into(),
                ));
            } else {
                return Err(fail(format!(
                    "unknown constraint {constraint:?} (known: vram=SIZE, cc>=MAJOR.MINOR, \
                     backend=NAME)"
                )));
            }
        }
        Ok(requirement)
    }
}

/// `key` then `operator` at the start of `constraint` (spaces allowed around the operator):
/// the value after them.
fn strip_key<'a>(constraint: &'a str, key: &str, operator: &str) -> Option<&'a str> {
    let rest = constraint.strip_prefix(key)?.trim_start();
    Some(rest.strip_prefix(operator)?.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Requirement {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn the_spec_forms() {
        assert_eq!(parse("gpu"), Requirement::any_gpu());
        assert_eq!(
            parse("gpu:vram=8GiB"),
            Requirement {
                min_free_vram: 8 << 30,
                ..Requirement::default()
            }
        );
        assert_eq!(
            parse("gpu:vram=8GiB,cc>=9.0"),
            Requirement {
                min_free_vram: 8 << 30,
                min_compute_capability: Some(ComputeCapability::new(9, 0)),
                backend: None,
            }
        );
        assert_eq!(
            parse("gpu,cc>=9.0"),
            Requirement {
                min_compute_capability: Some(ComputeCapability::new(9, 0)),
                ..Requirement::default()
            }
        );
        assert_eq!(parse("gpu:backend=cuda").backend.as_deref(), Some("cuda"));
        assert_eq!(parse("gpu:backend=Emu").backend.as_deref(), Some("emu"));
        assert_eq!(
            parse(" GPU : vram = 512MiB , cc >= 8.6 ").min_free_vram,
            512 << 20
        );
    }

    #[test]
    fn errors_name_the_problem() {
        for (text, needle) in [
            ("", "start with `gpu`"),
            ("cpu", "start with `gpu`"),
            ("gpux", "followed by `:`"),
            ("gpu:", "empty"),
            ("gpu:vram=8GiB,", "empty"),
            ("gpu:vram=lots", "whole number"),
            ("gpu:vram=8XB", "unit"),
            ("gpu:cc>=nine", "MAJOR.MINOR"),
            ("gpu:cc=9.0", "unknown constraint"),
            ("gpu:vram=1GiB,vram=2GiB", "twice"),
            ("gpu:backend=CUDA!", "backend name"),
            ("gpu:colour=red", "unknown constraint"),
        ] {
            let err = text.parse::<Requirement>().unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(err.contains("write gpu["), "{text}: {err}");
            assert!(!err.contains('\n'));
        }
        let long = format!("gpu:{}", "x".repeat(MAX_TEXT));
        assert!(long.parse::<Requirement>().is_err());
    }

    #[test]
    fn fits_checks_each_constraint() {
        let device = DeviceRecord {
            index: 0,
            name: "d".into(),
            backend: "emu".into(),
            uuid: String::new(),
            total_vram: 8 << 30,
            free_vram: 4 << 30,
            compute_capability: ComputeCapability::new(8, 6),
            leases: 0,
        };
        assert!(parse("gpu").fits(&device));
        assert!(parse("gpu:vram=4GiB").fits(&device));
        assert!(!parse("gpu:vram=5GiB").fits(&device));
        assert!(parse("gpu:cc>=8.6").fits(&device));
        assert!(!parse("gpu:cc>=9.0").fits(&device));
        assert!(parse("gpu:backend=emu").fits(&device));
        assert!(!parse("gpu:backend=cuda").fits(&device));
    }
}
