//! The digest of a component file, remembered by the file's identity so that a warm start does
//! not read and hash the whole component again (18 MB for a Python tasklet: ~20 ms on the
//! 2-core development machine, a fifth of a warm start).
//!
//! A record, one small file per component path under `<cache>/sources/`, holds the digest with
//! what `stat` said of the file when it was hashed: device, inode, size, modification and
//! change times to the nanosecond. The digest is taken from the record only while all of them
//! are unchanged. The change time (ctime) is the one that matters: every write, rename, or
//! `touch` sets it to the kernel's clock, and no call sets it back; so a file with the same
//! ctime has not been written since, with one exception that the recording rule closes.
//!
//! The exception: the kernel stamps times from a clock that advances in ticks of up to 10 ms,
//! so a write within the same tick as the file's last change leaves ctime as it was (the
//! "racy" case git handles the same way). A record is therefore written only when the file's
//! ctime was at least [`SETTLED`] old before its bytes were read: any later write gets a later
//! tick, hence another ctime. A file hashed just after it was built is hashed again on its next
//! run, and recorded then.
//!
//! A record that is missing, unreadable, or does not match is no error: the file is hashed.
//! The records live in the user's own cache folder, trusted as the compiled entries beside them
//! are.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tasklet_store::Digest;

/// How long a file must have been unchanged, before its bytes are read, for its digest to be
/// recorded: many clock ticks, and room for a filesystem whose times are whole seconds.
pub const SETTLED: Duration = Duration::from_secs(2);

/// The folder of records, beside the store's own folders.
const FOLDER: &str = "sources";

/// The first word of a record: its format.
const FORMAT: &str = "tasklet-source-digest-1";

/// What `stat` says of a file that its digest depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(metadata: &std::fs::Metadata) -> Identity {
        Identity {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.size(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }

    /// Whether the file last changed at least `SETTLED` before `now`.
    fn settled_at(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let (secs, nanos) = self.ctime;
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return false;
        };
        let ctime = Duration::new(secs, nanos.min(999_999_999));
        now.checked_sub(ctime).is_some_and(|age| age >= SETTLED)
    }

    fn line(&self, digest: &Digest) -> String {
        format!(
            "{FORMAT} {} {} {} {} {} {} {} {digest}\n",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    fn parse(line: &str) -> Option<(Identity, Digest)> {
        let mut words = line.trim_end().split(' ');
        if words.next()? != FORMAT {
            return None;
        }
        let mut number = || words.next()?.parse::<i64>().ok();
        let (dev, ino, size) = (number()?, number()?, number()?);
        let mtime = (number()?, number()?);
        let ctime = (number()?, number()?);
        let digest = Digest::parse(words.next()?).ok()?;
        if words.next().is_some() {
            return None;
        }
        let identity = Identity {
            dev: u64::try_from(dev).ok()?,
            ino: u64::try_from(ino).ok()?,
            size: u64::try_from(size).ok()?,
            mtime,
            ctime,
        };
        Some((identity, digest))
    }
}

/// Where digests of component files are remembered: `<cache>/sources/`.
pub struct SourceDigests {
    folder: PathBuf,
}

/// A component file's digest, and whether it came from a record (the file was not read).
pub struct Hashed {
    pub digest: Digest,
    /// The bytes, when they were read to hash them.
    pub bytes: Option<Vec<u8>>,
}

impl SourceDigests {
    pub fn new(cache: &Path) -> SourceDigests {
        SourceDigests {
            folder: cache.join(FOLDER),
        }
    }

    /// The digest of the file at `path`: from its record when the file is unchanged since,
    /// else read and hashed (and recorded, when the file is settled).
    pub fn digest(&self, path: &Path) -> std::io::Result<Hashed> {
        let mut file = File::open(path)?;
        let before = Identity::of(&file.metadata()?);
        let record = self.record_path(path);
        if let Some(digest) = record
            .as_deref()
            .and_then(|record| read_record(record, &before))
        {
            return Ok(Hashed {
                digest,
                bytes: None,
            });
        }
        let started = SystemTime::now();
        let mut bytes = Vec::with_capacity(usize::try_from(before.size).unwrap_or(0));
        file.read_to_end(&mut bytes)?;
        let digest = Digest::of(&bytes);
        let after = Identity::of(&file.metadata()?);
        if let Some(record) = record {
            if after == before && before.settled_at(started) && bytes.len() as u64 == before.size {
                // Best effort: without a record, the next run hashes the file again.
                let _ = self.write_record(&record, &before.line(&digest));
            }
        }
        Ok(Hashed {
            digest,
            bytes: Some(bytes),
        })
    }

    /// The record of the file at `path`, named by the digest of its canonical path; `None`
    /// when the path cannot be made canonical (the file is then hashed every time).
    fn record_path(&self, path: &Path) -> Option<PathBuf> {
        let canonical = std::fs::canonicalize(path).ok()?;
        let name = Digest::of(canonical.as_os_str().as_encoded_bytes()).to_hex();
        Some(self.folder.join(name))
    }

    /// Writes `line` as the record at `record`, whole: into a temp file, renamed into place.
    fn write_record(&self, record: &Path, line: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.folder)?;
        let temp = self.folder.join(format!(
            ".{}.{}.tmp",
            record
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("record"),
            std::process::id()
        ));
        std::fs::write(&temp, line)?;
        std::fs::rename(&temp, record).inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
    }
}

/// The digest the record at `record` holds, if it describes a file with identity `now`.
fn read_record(record: &Path, now: &Identity) -> Option<Digest> {
    let text = std::fs::read_to_string(record).ok()?;
    let (identity, digest) = Identity::parse(&text)?;
    (identity == *now).then_some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tasklet-source-digest-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// How many records the cache folder `dir` holds.
    fn records(dir: &Path) -> usize {
        std::fs::read_dir(dir.join(FOLDER))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    #[test]
    fn a_record_round_trips_and_anything_else_is_no_record() {
        let identity = Identity {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (4, 5),
            ctime: (6, 7),
        };
        let digest = Digest::of(b"x");
        let line = identity.line(&digest);
        assert_eq!(Identity::parse(&line), Some((identity, digest)));
        for bad in [
            String::new(),
            line.replace(FORMAT, "tasklet-source-digest-0"),
            line.replace(" 3 ", " -3 "),
            format!("{} extra", line.trim_end()),
            line[..line.len() - 10].to_string(),
        ] {
            assert_eq!(Identity::parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_file_changed_just_now_is_hashed_and_not_recorded() {
        let dir = temp_dir("fresh");
        let file = dir.join("c.wasm");
        std::fs::write(&file, b"one").unwrap();
        let digests = SourceDigests::new(&dir);
        let hashed = digests.digest(&file).unwrap();
        assert_eq!(hashed.digest, Digest::of(b"one"));
        assert_eq!(hashed.bytes.as_deref(), Some(&b"one"[..]));
        assert_eq!(records(&dir), 0, "its ctime is not settled");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_settled_file_is_recorded_and_any_change_to_it_is_seen() {
        let dir = temp_dir("settled");
        let file = dir.join("c.wasm");
        std::fs::write(&file, b"one").unwrap();
        let digests = SourceDigests::new(&dir);
        // A ctime cannot be set back; wait until this one is settled.
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let first = digests.digest(&file).unwrap();
        assert!(first.bytes.is_some(), "read the first time");
        assert_eq!(records(&dir), 1);
        let second = digests.digest(&file).unwrap();
        assert_eq!(second.digest, Digest::of(b"one"));
        assert!(second.bytes.is_none(), "taken from its record");

        // Rewritten with the same size, and its modification time put back: its ctime moved.
        let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, b"two").unwrap();
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let third = digests.digest(&file).unwrap();
        assert_eq!(third.digest, Digest::of(b"two"));
        assert!(third.bytes.is_some());

        // Replaced by another file under the same name: another inode.
        std::fs::write(dir.join("other"), b"three").unwrap();
        std::fs::rename(dir.join("other"), &file).unwrap();
        assert_eq!(digests.digest(&file).unwrap().digest, Digest::of(b"three"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_record_is_no_record() {
        let dir = temp_dir("damaged");
        let file = dir.join("c.wasm");
        std::fs::write(&file, b"one").unwrap();
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        let digests = SourceDigests::new(&dir);
        digests.digest(&file).unwrap();
        let record = digests.record_path(&file).unwrap();
        // The right identity with another digest cannot be told from a good record; a record
        // cut short or garbled can.
        let text = std::fs::read_to_string(&record).unwrap();
        std::fs::write(&record, &text[..text.len() / 2]).unwrap();
        let hashed = digests.digest(&file).unwrap();
        assert_eq!(hashed.digest, Digest::of(b"one"));
        assert!(hashed.bytes.is_some(), "hashed again");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
