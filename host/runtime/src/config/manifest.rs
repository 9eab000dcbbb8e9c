//! `tasklet.toml`: what a tasklet asks for. It sits beside the tasklet; paths in it are relative
//! to it.

use super::rights::{Right, Rights};
use super::value::{locate, Size, Time};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const MANIFEST_FILE: &str = "tasklet.toml";

/// The longest tasklet name a manifest may give.
const MAX_NAME_CHARS: usize = 64;

/// Whether `c` would move, break or reorder the text around a name printed in it: a control
/// character, a line or paragraph separator, or a bidirectional formatting character.
fn moves_text(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
        )
        || ('\u{202A}'..='\u{202E}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub name: String,
    /// The component (.wasm), resolved against the manifest's folder.
    pub component: PathBuf,
    pub limits: Limits,
    pub gpu: GpuRequest,
}

/// Limits of the wasm instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of linear memory (all memories together).
    pub memory: u64,
    /// Longest a single `run` may take, host calls included.
    pub wall_time: Duration,
}

/// What the tasklet asks of the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuRequest {
    /// Most device memory granted to all its leases at once.
    pub max_vram: u64,
    /// Most leases held at once.
    pub max_leases: u32,
    /// Longest a lease may last, renewals included.
    pub max_lease_time: Duration,
    /// Most persistent kernels running at once, all leases together (each needs the
    /// `persistent` right).
    pub max_persistent: u32,
    pub rights: Rights,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory: 64 << 20,
            wall_time: Duration::from_secs(30),
        }
    }
}

impl Default for GpuRequest {
    /// A manifest without `[gpu]` asks for no GPU at all.
    fn default() -> Self {
        GpuRequest {
            max_vram: 0,
            max_leases: 0,
            max_lease_time: Duration::ZERO,
            max_persistent: 0,
            rights: Rights::NONE,
        }
    }
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Neither a tasklet folder nor a manifest file is at the path given.
    #[error(
        "{path} does not exist: give a tasklet folder (with tasklet.toml) or its manifest file"
    )]
    Missing { path: PathBuf },
    /// A folder without a manifest.
    #[error(
        "{dir} has no tasklet.toml: give a tasklet folder (with tasklet.toml) or its manifest file"
    )]
    NoManifest { dir: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<u32>,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawManifest {
    name: String,
    component: PathBuf,
    #[serde(default)]
    limits: RawLimits,
    gpu: Option<RawGpu>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawLimits {
    memory: Option<Size>,
    wall_time: Option<Time>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawGpu {
    max_vram: Size,
    #[serde(default = "one")]
    max_leases: u32,
    max_lease_secs: Time,
    /// Default: 1 with the `persistent` right, 0 without it (see [`Manifest::parse`]).
    max_persistent: Option<u32>,
    rights: Rights,
}

fn one() -> u32 {
    1
}

impl Manifest {
    /// Reads `tasklet.toml` from a tasklet folder, or a manifest file named directly.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let file = if path.is_dir() {
            path.join(MANIFEST_FILE)
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read_to_string(&file).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound if path.is_dir() => ManifestError::NoManifest {
                dir: path.to_path_buf(),
            },
            std::io::ErrorKind::NotFound => ManifestError::Missing { path: file.clone() },
            _ => ManifestError::Io {
                path: file.clone(),
                source,
            },
        })?;
        let dir = file.parent().unwrap_or(Path::new("."));
        Manifest::parse(&text, dir).map_err(|(line, message)| ManifestError::Invalid {
            path: file,
            line,
            message,
        })
    }

    /// Parses manifest text; relative paths resolve against `dir`. Errors carry the line.
    pub fn parse(text: &str, dir: &Path) -> Result<Manifest, (Option<u32>, String)> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| locate(text, &e))?;
        let line_of = |key: &str| {
            text.lines()
                .position(|l| l.trim_start().starts_with(key))
                .map(|i| i as u32 + 1)
        };
        if raw.name.trim().is_empty() {
            return Err((line_of("name"), "`name` must not be empty".into()));
        }
        // The name is printed to terminals and written to a node's logs: nothing in it may
        // move a cursor, start a line or color what follows.
        if raw.name.chars().count() > MAX_NAME_CHARS || raw.name.chars().any(moves_text) {
            return Err((
                line_of("name"),
                format!(
                    "`name` \"{}\" must be at most {MAX_NAME_CHARS} characters, none of them a control character (a newline, tab or escape) or one that reorders or breaks text (U+2028, U+202E, …)",
                    raw.name.chars().take(MAX_NAME_CHARS).collect::<String>().escape_debug()
                ),
            ));
        }
        let defaults = Limits::default();
        let limits = Limits {
            memory: raw.limits.memory.map_or(defaults.memory, |s| s.0),
            wall_time: raw.limits.wall_time.map_or(defaults.wall_time, |t| t.0),
        };
        if limits.memory == 0 || limits.wall_time.is_zero() {
            return Err((
                line_of("memory").or(line_of("wall-time")),
                "`[limits]` values must be greater than zero".into(),
            ));
        }
        let gpu = match raw.gpu {
            None => GpuRequest::default(),
            Some(g) => GpuRequest {
                max_vram: g.max_vram.0,
                max_leases: g.max_leases,
                max_lease_time: g.max_lease_secs.0,
                max_persistent: max_persistent(&g).map_err(|m| (line_of("max-persistent"), m))?,
                rights: g.rights,
            },
        };
        Ok(Manifest {
            name: raw.name,
            component: dir.join(raw.component),
            limits,
            gpu,
        })
    }
}

/// `max-persistent`, which follows the `persistent` right: 1 when the manifest names the right
/// and leaves the key out, 0 without the right. A count that the rights make meaningless (some
/// without the right, none with it) is refused rather than quietly ignored.
fn max_persistent(g: &RawGpu) -> Result<u32, String> {
    let persistent = g.rights.contains(Right::Persistent);
    match (g.max_persistent, persistent) {
        (None, true) => Ok(1),
        (None, false) => Ok(0),
        (Some(0), true) => Err(
            "`max-persistent = 0` leaves the `persistent` right unusable; set it to 1 or more, \
             or take \"persistent\" out of `rights`"
                .into(),
        ),
        (Some(n), false) if n > 0 => Err(format!(
            "`max-persistent = {n}` needs the `persistent` right; add \"persistent\" to `rights`, \
             or take `max-persistent` out"
        )),
        (Some(n), _) => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_or_manifest_says_what_to_give() {
        let dir = std::env::temp_dir().join(format!("tasklet-no-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Manifest::load(&dir.join("nope")).unwrap_err();
        assert!(matches!(err, ManifestError::Missing { .. }), "{err:?}");
        assert!(err
            .to_string()
            .contains("does not exist: give a tasklet folder"));
        let err = Manifest::load(&dir).unwrap_err();
        let _ = std::fs::remove_dir(&dir);
        assert!(matches!(err, ManifestError::NoManifest { .. }), "{err:?}");
        assert!(err.to_string().contains("has no tasklet.toml"));
    }

    const GOOD: &str = r#"
name = "iota"
component = "out/iota.wasm"

[limits]
memory = "32MiB"
wall-time = "10s"

[gpu]
max-vram = "256MiB"
max-leases = 2
max-lease-secs = "60s"
rights = ["alloc", "read", "launch"]
"#;

    #[test]
    fn parses_a_full_manifest() {
        let m = Manifest::parse(GOOD, Path::new("/t")).unwrap();
        assert_eq!(m.name, "iota");
        assert_eq!(m.component, Path::new("/t/out/iota.wasm"));
        assert_eq!(m.limits.memory, 32 << 20);
        assert_eq!(m.limits.wall_time, Duration::from_secs(10));
        assert_eq!(m.gpu.max_vram, 256 << 20);
        assert_eq!(m.gpu.max_leases, 2);
        assert!(m.gpu.rights.contains(super::super::rights::Right::Launch));
        assert!(!m.gpu.rights.contains(super::super::rights::Right::Write));
    }

    #[test]
    fn a_name_with_control_characters_or_too_long_is_refused_on_its_line() {
        for bad in [
            "iota\\nINFO fake",
            "red\\u001b[31m",
            "evil\\u202Etxt.exe",
            "two\\u2028lines",
            &"n".repeat(65),
        ] {
            let text = GOOD.replace("name = \"iota\"", &format!("name = \"{bad}\""));
            let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
            assert_eq!(line, Some(2), "{msg}");
            assert!(msg.contains("must be at most 64 characters"), "{msg}");
            assert!(!msg.chars().any(moves_text), "{msg:?}");
        }
        let ok = GOOD.replace("name = \"iota\"", "name = \"my tasklet v1.2\"");
        assert_eq!(
            Manifest::parse(&ok, Path::new(".")).unwrap().name,
            "my tasklet v1.2"
        );
    }

    #[test]
    fn a_missing_key_is_named_alone() {
        let (_, msg) = Manifest::parse("component = \"t.wasm\"\n", Path::new(".")).unwrap_err();
        assert_eq!(msg, "missing field `name`");
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let text = GOOD.replace("max-leases = 2", "max-leases = 2\nmax-gpus = 3");
        let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
        assert_eq!(line, Some(12), "{msg}");
        assert!(msg.contains("max-gpus"), "{msg}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let text = GOOD.replace("\"256MiB\"", "\"256 parsecs\"");
        let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
        assert_eq!(line, Some(10), "{msg}");
        assert!(
            msg.contains("max-vram") && msg.contains("unknown size unit"),
            "{msg}"
        );

        let text = GOOD.replace("\"launch\"]", "\"fly\"]");
        let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
        assert_eq!(line, Some(13), "{msg}");
        assert!(msg.contains("fly"), "{msg}");
    }

    #[test]
    fn persistent_is_granted_only_when_named_and_max_persistent_follows_it() {
        // The usual five rights: no `persistent`, and no persistent kernels.
        let five = GOOD.replace("\"launch\"]", "\"write\", \"load\", \"launch\"]");
        let m = Manifest::parse(&five, Path::new(".")).unwrap();
        assert!(!m.gpu.rights.contains(Right::Persistent));
        assert_eq!(m.gpu.max_persistent, 0);
        // Named: the key defaults to 1.
        let named = GOOD.replace("\"launch\"]", "\"launch\", \"persistent\"]");
        let m = Manifest::parse(&named, Path::new(".")).unwrap();
        assert!(m.gpu.rights.contains(Right::Persistent));
        assert_eq!(m.gpu.max_persistent, 1);
        // Set: taken as given.
        let three = named.replace("max-leases = 2", "max-leases = 2\nmax-persistent = 3");
        let m = Manifest::parse(&three, Path::new(".")).unwrap();
        assert_eq!(m.gpu.max_persistent, 3);
        // An empty rights list gets no right at all.
        let none = GOOD.replace("[\"alloc\", \"read\", \"launch\"]", "[]");
        let m = Manifest::parse(&none, Path::new(".")).unwrap();
        assert_eq!(m.gpu.rights, Rights::NONE);
        assert_eq!(m.gpu.max_persistent, 0);
    }

    #[test]
    fn max_persistent_without_its_right_or_zero_with_it_is_refused() {
        let text = GOOD.replace("max-leases = 2", "max-leases = 2\nmax-persistent = 2");
        let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
        assert_eq!(line, Some(12), "{msg}");
        assert!(
            msg.contains("`max-persistent = 2` needs the `persistent` right"),
            "{msg}"
        );
        // 0 without the right is just the default, said out loud.
        let text = GOOD.replace("max-leases = 2", "max-leases = 2\nmax-persistent = 0");
        assert_eq!(
            Manifest::parse(&text, Path::new("."))
                .unwrap()
                .gpu
                .max_persistent,
            0
        );
        let text = GOOD
            .replace(
                "max-leases = 2",
                "max-leases = 2\nmax-persistent = 0\nrights = [\"launch\", \"persistent\"]",
            )
            .replace("rights = [\"alloc\", \"read\", \"launch\"]\n", "");
        let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
        assert_eq!(line, Some(12), "{msg}");
        assert!(msg.contains("unusable"), "{msg}");
    }

    #[test]
    fn max_persistent_of_the_wrong_type_names_key_and_line() {
        for bad in ["\"many\"", "-1", "1.5", "true"] {
            let text = GOOD.replace(
                "max-leases = 2",
                &format!("max-leases = 2\nmax-persistent = {bad}"),
            );
            let (line, msg) = Manifest::parse(&text, Path::new(".")).unwrap_err();
            assert_eq!(line, Some(12), "{bad}: {msg}");
            assert!(msg.contains("max-persistent"), "{bad}: {msg}");
        }
    }

    #[test]
    fn missing_gpu_section_means_no_gpu() {
        let m = Manifest::parse("name = \"x\"\ncomponent = \"x.wasm\"\n", Path::new(".")).unwrap();
        assert_eq!(m.gpu, GpuRequest::default());
        assert_eq!(m.limits, Limits::default());
    }
}
