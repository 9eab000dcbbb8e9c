//! Human sizes ("64MiB") and durations ("30s") as manifests and policies write them.

use std::time::Duration;

/// Parses a byte size: a non-negative integer with an optional unit (B, KiB, MiB, GiB, TiB, or the
/// decimal KB, MB, GB, TB). A bare number is bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = split_number(text)?;
    let scale: u64 = match unit {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
            "unknown size unit {other:?} in {text:?}; use B, KiB, MiB, GiB or TiB, or KB, MB, GB, TB (e.g. \"64MiB\")"
        ))
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Parses a duration: a non-negative integer with a unit (ms, s, m, h). A bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = split_number(text)?;
    let millis: u64 = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        other => {
            return Err(format!(
                "unknown time unit {other:?} in {text:?}; use ms, s, m or h (e.g. \"30s\")"
            ))
        }
    };
    number
        .checked_mul(millis)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

fn split_number(text: &str) -> Result<(u64, &str), String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(text.len());
    if digits == 0 {
        return Err(format!("{text:?} does not start with a number"));
    }
    let number: String = text[..digits].chars().filter(|&c| c != '_').collect();
    let number = number
        .parse::<u64>()
        .map_err(|_| format!("{text:?} is too large"))?;
    Ok((number, text[digits..].trim_start()))
}

/// The binary units sizes are written in, largest first.
const BINARY_UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// Formats a byte count the way a person would write it back into a manifest.
pub fn format_size(bytes: u64) -> String {
    for (name, scale) in BINARY_UNITS {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{name}", bytes / scale);
        }
    }
    format!("{bytes}B")
}

/// Bytes as a person reads them, rounded to one decimal in the largest binary unit that fits:
/// `140.4 GiB`, `256 MiB`, `512 B`. For reading only: a size that must stay exact (one to write
/// back into a manifest) is [`format_size`]'s (`256MiB`, `1000B`).
pub fn rounded_size(bytes: u64) -> String {
    for (i, (name, scale)) in BINARY_UNITS.into_iter().enumerate() {
        if bytes >= scale {
            let whole = bytes / scale;
            if whole * scale == bytes {
                return format!("{whole} {name}");
            }
            let rounded = format!("{:.1}", bytes as f64 / scale as f64);
            // Just under the next unit rounds up to it: 1.0 GiB, not 1024.0 MiB.
            return match (rounded.as_str(), i.checked_sub(1)) {
                ("1024.0", Some(up)) => format!("1.0 {}", BINARY_UNITS[up].0),
                _ => format!("{rounded} {name}"),
            };
        }
    }
    format!("{bytes} B")
}

/// Two sizes shown side by side: rounded for reading, unless rounding would make them look
/// the same (4095 MiB and 4 GiB both read 4.0 GiB), then exact.
pub fn sizes_told_apart(a: u64, b: u64) -> (String, String) {
    let same = |x: &str, y: &str| x.replace(".0 ", " ") == y.replace(".0 ", " ");
    match (rounded_size(a), rounded_size(b)) {
        (x, y) if same(&x, &y) && a != b => (format_size(a), format_size(b)),
        rounded => rounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_side_by_side_are_rounded_unless_that_hides_the_difference() {
        assert_eq!(
            sizes_told_apart(128 << 20, 256 << 20),
            ("128 MiB".to_owned(), "256 MiB".to_owned())
        );
        assert_eq!(
            sizes_told_apart(4095 << 20, 4 << 30),
            ("4095MiB".to_owned(), "4GiB".to_owned())
        );
        assert_eq!(
            sizes_told_apart(4 << 30, 4 << 30),
            ("4 GiB".to_owned(), "4 GiB".to_owned())
        );
    }

    #[test]
    fn rounded_sizes_read_as_a_person_reads_them() {
        assert_eq!(rounded_size(256 << 20), "256 MiB");
        assert_eq!(rounded_size((3 << 30) + (1 << 29)), "3.5 GiB");
        assert_eq!(rounded_size(512), "512 B");
        assert_eq!(rounded_size(4 << 40), "4 TiB");
        assert_eq!(rounded_size((1 << 30) - 1), "1.0 GiB");
        assert_eq!(rounded_size((1 << 10) - 1), "1023 B");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2MB"), Ok(2_000_000));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12XB")
            .unwrap_err()
            .contains("unknown size unit"));
        assert!(parse_size("99999999999TiB")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(format_size(64 << 20), "64MiB");
        assert_eq!(format_size(1000), "1000B");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("3 weeks").is_err());
    }
}
