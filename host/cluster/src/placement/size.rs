//! Byte sizes as people write them in requirements: `8GiB`, `512MiB`, `16GB`, `4096` — spelled
//! as manifests and policies spell them (`tasklet_runtime`'s sizes), so that one size means the
//! same everywhere.

/// Units accepted after the number, as written (case matters: `Gb` would be gigabits). Binary
/// units are powers of 1024, decimal ones powers of 1000: `8GiB` is what a GPU's "8 GB" usually
/// means.
const UNITS: [(&str, u64); 10] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// Why a size was refused (the caller says which text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SizeError {
    NoNumber,
    UnknownUnit,
    TooLarge,
}

impl SizeError {
    pub(crate) fn explain(self) -> &'static str {
        match self {
            SizeError::NoNumber => {
                "it is not a whole number followed by a unit (write 1536MiB, not 1.5GiB)"
            }
            SizeError::UnknownUnit => {
                "its unit is not one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB (as written: Gb or gib is not GiB)"
            }
            SizeError::TooLarge => "it is larger than 2^64 bytes",
        }
    }
}

/// Parses a whole number followed by an optional unit.
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    // As manifests read sizes: blanks around it ignored, `_` between digits allowed.
    let text = text.trim();
    let digits = text
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'_')
        .count();
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(SizeError::NoNumber);
    }
    let (number, unit) = text.split_at(digits);
    // A fraction: said as such, not as a unit "." nobody meant.
    if unit.starts_with(['.', ',']) {
        return Err(SizeError::NoNumber);
    }
    let number: String = number.chars().filter(|&c| c != '_').collect();
    let number: u64 = number.parse().map_err(|_| SizeError::TooLarge)?;
    let unit = unit.trim_start();
    let multiplier = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|&(_, multiplier)| multiplier)
            .ok_or(SizeError::UnknownUnit)?
    };
    number.checked_mul(multiplier).ok_or(SizeError::TooLarge)
}

/// The shortest exact spelling of `bytes` in binary units, which [`parse_size`] reads back.
pub(crate) fn format_size(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("16kB"), Ok(16_000));
        assert_eq!(parse_size("8_192MiB"), Ok(8192 << 20));
        assert_eq!(parse_size(" 8GiB "), Ok(8 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("16GB"), Ok(16_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1 KiB"), Ok(1024));
        assert_eq!(parse_size("0B"), Ok(0));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse_size(""), Err(SizeError::NoNumber));
        assert_eq!(parse_size("GiB"), Err(SizeError::NoNumber));
        assert_eq!(parse_size("1.5GiB"), Err(SizeError::NoNumber));
        assert_eq!(parse_size("8Gb"), Err(SizeError::UnknownUnit));
        assert_eq!(parse_size("8gib"), Err(SizeError::UnknownUnit));
        assert_eq!(parse_size("8 gigs"), Err(SizeError::UnknownUnit));
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::TooLarge));
        assert_eq!(parse_size("16777216TiB"), Err(SizeError::TooLarge));
    }

    #[test]
    fn formatting_reads_back() {
        for bytes in [0, 1, 1023, 1024, 1536 << 20, 8 << 30, 3 << 40, u64::MAX] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes), "{bytes}");
        }
        assert_eq!(format_size(8 << 30), "8GiB");
        assert_eq!(format_size(1536 << 20), "1536MiB");
    }
}
