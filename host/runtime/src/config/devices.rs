//! `[emu] devices` and `[cuda] devices`: which devices a node lends, one warm pool each.
//!
//! - `[emu] devices = ["16GiB", "16GiB", "8GiB"]`: the emulator presents one device per entry,
//!   of that size. Left out: one device of `[workers] emu-memory`.
//! - `[cuda] devices = ["0", "GPU-…", "MIG-…"]`: the GPUs (by NVML index or UUID) or MIG
//!   instances to lend, one slot each. A GPU listed twice is lent as two slots that share its
//!   memory equally (each with its own pool and books). Left out: every GPU NVML lists (every
//!   MIG instance of a GPU in MIG mode).

use super::value::Size;
use serde::de::{self, Deserializer};
use serde::Deserialize;

/// The most device slots one node lends (a node's registry record lists at most 256 devices).
pub const MAX_DEVICE_SLOTS: usize = 64;

/// The devices a policy names, per backend; `None` keeps the backend's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevicePolicy {
    /// `[emu] devices`: each emulated device's memory.
    pub emu: Option<Vec<u64>>,
    /// `[cuda] devices`: the GPUs or MIG instances to lend, in order.
    pub cuda: Option<Vec<DeviceSelector>>,
}

/// One entry of `[cuda] devices`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelector {
    /// A GPU by its NVML index (as `nvidia-smi` numbers them).
    Index(u32),
    /// A GPU (`GPU-…`) or MIG instance (`MIG-…`) by UUID.
    Uuid(String),
}

impl std::fmt::Display for DeviceSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSelector::Index(i) => write!(f, "GPU {i}"),
            DeviceSelector::Uuid(u) => f.write_str(u),
        }
    }
}

impl DeviceSelector {
    /// Parses an entry: a decimal NVML index, or a UUID starting `GPU-` or `MIG-`.
    pub fn parse(text: &str) -> Result<DeviceSelector, String> {
        let t = text.trim();
        if let Ok(i) = t.parse::<u32>() {
            return Ok(DeviceSelector::Index(i));
        }
        let uuid_like = (t.starts_with("GPU-") || t.starts_with("MIG-"))
            && t.len() > 4
            && t[4..]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '/');
        if uuid_like {
            return Ok(DeviceSelector::Uuid(t.to_owned()));
        }
        Err(format!(
            "{text:?} is not a GPU; write an NVML index (\"0\") or a UUID as nvidia-smi -L prints it (\"GPU-…\", \"MIG-…\")"
        ))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawEmu {
    pub devices: Option<Vec<Size>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawCuda {
    pub devices: Option<Vec<Selector>>,
}

/// A `[cuda] devices` entry as TOML gives it: a string, or a bare index.
pub(super) struct Selector(pub DeviceSelector);

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Selector;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a GPU index such as \"0\" or a UUID such as \"GPU-…\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Selector, E> {
                DeviceSelector::parse(v).map(Selector).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Selector, E> {
                u32::try_from(v)
                    .map(|i| Selector(DeviceSelector::Index(i)))
                    .map_err(|_| E::custom(format!("{v} is not a GPU index")))
            }
        }
        d.deserialize_any(V)
    }
}

impl DevicePolicy {
    /// Builds the policy's devices from its `[emu]` and `[cuda]` sections, checking what TOML
    /// types cannot: a list names at least one device and at most [`MAX_DEVICE_SLOTS`], and no
    /// emulated device is empty.
    pub(super) fn from_raw(emu: RawEmu, cuda: RawCuda) -> Result<DevicePolicy, String> {
        let emu = emu
            .devices
            .map(|sizes| sizes.into_iter().map(|s| s.0).collect::<Vec<u64>>());
        let cuda = cuda
            .devices
            .map(|list| list.into_iter().map(|s| s.0).collect::<Vec<_>>());
        for (section, len) in [
            ("emu", emu.as_ref().map(Vec::len)),
            ("cuda", cuda.as_ref().map(Vec::len)),
        ] {
            match len {
                Some(0) => {
                    return Err(format!(
                        "`[{section}] devices` lists no device; list at least one, or leave the key out for the default"
                    ))
                }
                Some(n) if n > MAX_DEVICE_SLOTS => {
                    return Err(format!(
                        "`[{section}] devices` lists {n} devices; a node lends at most {MAX_DEVICE_SLOTS}"
                    ))
                }
                _ => {}
            }
        }
        if let Some(i) = emu.iter().flatten().position(|&m| m == 0) {
            return Err(format!(
                "`[emu] devices` entry {i} is 0 bytes; give each emulated device a size such as \"16GiB\""
            ));
        }
        Ok(DevicePolicy { emu, cuda })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_indexes_and_uuids_only() {
        assert_eq!(DeviceSelector::parse("3"), Ok(DeviceSelector::Index(3)));
        assert_eq!(
            DeviceSelector::parse(" GPU-0a1b-2c "),
            Ok(DeviceSelector::Uuid("GPU-0a1b-2c".into()))
        );
        assert!(DeviceSelector::parse("MIG-GPU-aa/1/0").is_ok());
        for bad in ["", "GPU-", "gpu0", "-1", "GPU-a b", "all"] {
            let e = DeviceSelector::parse(bad).unwrap_err();
            assert!(e.contains("nvidia-smi -L"), "{bad}: {e}");
        }
    }
}
