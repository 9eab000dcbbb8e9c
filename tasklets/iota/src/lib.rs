//! `iota`: the whole path once: lease → session → alloc → module load → launch → sync → read.
//!
//! Input: a decimal element count `n` (256 when the input is empty or whitespace).
//! Output: `n` lines, the integers `1..=n`, each followed by `\n`, computed on the device by the
//! `iota` kernel (`out[i] = i + 1`).

use std::fmt::Write as _;

use tasklet_gpu::{LaunchConfig, Lease};

const IOTA_PTX: &str = include_str!("../../../kernels/iota.ptx");
const DEFAULT_N: u32 = 256;

fn run(input: Vec<u8>) -> Result<Vec<u8>, String> {
    let n = parse_count(&input)?;
    let values = if n == 0 { Vec::new() } else { iota(n)? };
    let mut out = String::with_capacity(values.len() * 8);
    for v in values {
        writeln!(out, "{v}").expect("writing to a String cannot fail");
    }
    Ok(out.into_bytes())
}

tasklet_gpu::export!(run);

fn iota(n: u32) -> Result<Vec<u32>, tasklet_gpu::Error> {
    let lease = Lease::builder()
        .min_vram_for::<u32>(n as usize)
        .secs(30)
        .acquire()?;
    let session = lease.session()?;
    let out = session.alloc::<u32>(n as usize)?;
    let module = session.load_ptx(IOTA_PTX)?;
    session
        .launch(&module, "iota")
        .config(LaunchConfig::for_num_elems(n))
        .arg(&out)
        .arg(n)
        .run()?;
    session.sync()?;
    out.read()
}

fn parse_count(input: &[u8]) -> Result<u32, String> {
    let text = std::str::from_utf8(input).map_err(|e| format!("invalid input: not UTF-8 ({e})"))?;
    let text = text.trim();
    if text.is_empty() {
        return Ok(DEFAULT_N);
    }
    text.parse().map_err(|_| {
        format!(
            "invalid input {text:?}: expected a decimal element count from 0 to {}",
            u32::MAX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts() {
        assert_eq!(parse_count(b""), Ok(256));
        assert_eq!(parse_count(b" \n\t"), Ok(256));
        assert_eq!(parse_count(b"10\n"), Ok(10));
        assert_eq!(parse_count(b"0"), Ok(0));
        assert!(parse_count(b"-1").unwrap_err().contains("\"-1\""));
        assert!(parse_count(b"ten").is_err());
        assert!(parse_count(b"4294967296").is_err());
        assert!(parse_count(&[0xff]).is_err());
    }
}
