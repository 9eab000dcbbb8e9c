//! A deployment record: the small text file that ties a manifest to a component.
//!
//! ```text
//! tasklet-deployment 1
//! component <64 hex> <length>
//! manifest <64 hex> <length>
//! ```
//!
//! A deployment's digest is the SHA-256 of its record, so it names the pair exactly: the same
//! component pushed with another manifest (other limits, other rights) is another deployment,
//! and what a digest runs can never change after it was printed.

use crate::digest::Digest;

use super::{BlobRef, Deployment};

/// The first line, with the format's version.
const HEADER: &str = "tasklet-deployment 1";

/// The longest record this store writes (its lines at their longest), and so the most read
/// from a file in `deployments/`.
pub(crate) const MAX_RECORD_BYTES: u64 = 256;

/// The record naming `component` and `manifest`.
pub(crate) fn encode(component: &BlobRef, manifest: &BlobRef) -> Vec<u8> {
    format!(
        "{HEADER}\ncomponent {} {}\nmanifest {} {}\n",
        component.digest, component.len, manifest.digest, manifest.len
    )
    .into_bytes()
}

/// Reads a record whose bytes hashed to `digest`.
pub(crate) fn decode(digest: Digest, bytes: &[u8]) -> Result<Deployment, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let mut lines = text
        .strip_suffix('\n')
        .ok_or("no final newline")?
        .split('\n');
    if lines.next() != Some(HEADER) {
        return Err(format!("its first line is not {HEADER:?}"));
    }
    let component = blob_line(lines.next(), "component")?;
    let manifest = blob_line(lines.next(), "manifest")?;
    if lines.next().is_some() {
        return Err("more than three lines".into());
    }
    Ok(Deployment {
        digest,
        component,
        manifest,
    })
}

fn blob_line(line: Option<&str>, key: &str) -> Result<BlobRef, String> {
    let missing = || format!("no {key} line");
    let rest = line
        .and_then(|line| line.strip_prefix(key))
        .ok_or_else(missing)?;
    let (digest, len) = rest
        .strip_prefix(' ')
        .and_then(|rest| rest.split_once(' '))
        .ok_or_else(missing)?;
    let digest = Digest::parse(digest).map_err(|err| format!("{key}: {err}"))?;
    let len = len
        .parse()
        .map_err(|_| format!("{key}: length {len:?} is not a number"))?;
    Ok(BlobRef { digest, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_longest_record_fits() {
        let component = BlobRef {
            digest: Digest::of(b"c"),
            len: u64::MAX,
        };
        let manifest = BlobRef {
            digest: Digest::of(b"m"),
            len: u64::MAX,
        };
        let bytes = encode(&component, &manifest);
        assert!(bytes.len() as u64 <= MAX_RECORD_BYTES, "{}", bytes.len());
        let digest = Digest::of(&bytes);
        let decoded = decode(digest, &bytes).unwrap();
        assert_eq!(
            decoded,
            Deployment {
                digest,
                component,
                manifest
            }
        );
    }

    #[test]
    fn malformed_records_are_refused() {
        let good = String::from_utf8(encode(
            &BlobRef {
                digest: Digest::of(b"c"),
                len: 1,
            },
            &BlobRef {
                digest: Digest::of(b"m"),
                len: 2,
            },
        ))
        .unwrap();
        for bad in [
            String::new(),
            good.trim_end().to_string(),
            good.replace("tasklet-deployment 1", "tasklet-deployment 2"),
            good.replace("component", "manifest"),
            good.replace(" 1\nmanifest", " x\nmanifest"),
            format!("{good}extra\n"),
            good.to_uppercase(),
        ] {
            assert!(
                decode(Digest::of(bad.as_bytes()), bad.as_bytes()).is_err(),
                "{bad:?}"
            );
        }
    }
}
