//! TOML value types shared by manifests and policies: sizes, durations and rights that accept both
//! the human form ("64MiB", "30s") and a bare integer (bytes, seconds).

use super::rights::{Right, Rights};
use super::units::{parse_duration, parse_size};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time(pub Duration);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"64MiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Time;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"30s\" or a number of seconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Time, E> {
                parse_duration(v).map(Time).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Time, E> {
                u64::try_from(v)
                    .map(|s| Time(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Time, E> {
                Ok(Time(Duration::from_secs(v)))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Rights {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(d)?;
        names
            .iter()
            .map(|n| {
                Right::from_name(n).ok_or_else(|| {
                    let known: Vec<_> = Right::ALL.into_iter().map(Right::name).collect();
                    de::Error::custom(format!(
                        "unknown right {n:?}; rights are {}",
                        known.join(", ")
                    ))
                })
            })
            .collect()
    }
}

/// The line of `key` in table `[table]` of `source` (the first such key after the header), for
/// errors found after parsing.
pub(crate) fn key_line(source: &str, table: &str, key: &str) -> Option<u32> {
    let header = format!("[{table}]");
    let mut inside = false;
    for (i, line) in source.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line.split('#').next().map(str::trim) == Some(header.as_str());
        } else if inside
            && line
                .split_once('=')
                .is_some_and(|(k, _)| k.trim().trim_matches('"') == key)
        {
            return u32::try_from(i + 1).ok();
        }
    }
    None
}

/// Turns a TOML error into (line, message) with the key named when the span points at a value.
pub(crate) fn locate(source: &str, err: &toml::de::Error) -> (Option<u32>, String) {
    let message = err.message().trim().to_string();
    let Some(span) = err.span() else {
        return (None, message);
    };
    let start = span.start.min(source.len());
    let line_no = source[..start].bytes().filter(|&b| b == b'\n').count() as u32 + 1;
    let line_text = source.lines().nth(line_no as usize - 1).unwrap_or("");
    // A missing field's span is its table, whose first line names some other key.
    let key = line_text
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('[') && !message.starts_with("missing field"));
    let message = match key {
        Some(key) if !message.contains(key) => format!("`{key}`: {message}"),
        _ => message,
    };
    (Some(line_no), message)
}
