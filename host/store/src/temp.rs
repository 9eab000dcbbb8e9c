//! Files being written: created in `tmp/`, made durable, then renamed into place whole.
//!
//! Nothing is ever written under its final name. A reader therefore sees either no file or a
//! complete one, a crash leaves at most a stray file in `tmp/` (cleared when a store opens),
//! and a failed write is undone by dropping its [`TempFile`].

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cap_std::fs::{File, OpenOptions};

use crate::area::Area;
use crate::error::Error;
use crate::store::Inner;

/// How many names a new temp file tries before giving up; only another store on the same
/// root, in a process with the same id, could make the first one taken.
const NAME_TRIES: u64 = 16;

/// Files in `tmp/` untouched for this long belong to no write still going on: a write in
/// progress touches its file whenever bytes arrive.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(60 * 60);

/// Distinguishes the temp files of one process.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A file in `tmp/`, removed when dropped unless it was renamed into place.
pub(crate) struct TempFile {
    inner: Arc<Inner>,
    name: String,
    file: File,
    placed: bool,
}

impl TempFile {
    pub(crate) fn create(inner: &Arc<Inner>) -> Result<TempFile, Error> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let name = format!(
                "{}-{}-{}",
                std::process::id(),
                SEQUENCE.fetch_add(1, Ordering::Relaxed),
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
            );
            match inner.tmp.dir.open_with(&name, &options) {
                Ok(file) => {
                    return Ok(TempFile {
                        inner: Arc::clone(inner),
                        name,
                        file,
                        placed: false,
                    })
                }
                Err(err)
                    if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < NAME_TRIES => {}
                Err(err) => return Err(inner.tmp.error("create", &name, err)),
            }
        }
    }

    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.file
            .write_all(bytes)
            .map_err(|err| self.inner.tmp.error("write", &self.name, err))
    }

    /// Forces the file's bytes to disk.
    ///
    /// Done before the rename that gives the file its final name: a filesystem may make the
    /// rename durable before the data (ext4 with delayed allocation does), and a crash in
    /// between would leave a final name on a short or zero-filled file. The store would then
    /// report that content as present to the next push, and only a read would find it damaged.
    pub(crate) fn sync(&self) -> Result<(), Error> {
        self.file
            .sync_all()
            .map_err(|err| self.inner.tmp.error("sync", &self.name, err))
    }

    /// Sets the file's modification time (the compiled cache orders its entries by it).
    pub(crate) fn set_modified(&self, time: SystemTime) -> Result<(), Error> {
        let set = || self.file.try_clone()?.into_std().set_modified(time);
        set().map_err(|err| self.inner.tmp.error("set the time of", &self.name, err))
    }

    /// Renames the file to `name` in `area`, replacing what is there, and makes the rename
    /// durable.
    ///
    /// The area's folder is synced before this returns because the caller reports success
    /// next (a pushing client may then discard its copy); until the folder is synced a crash
    /// could undo the rename and lose the content.
    pub(crate) fn place(mut self, area: &Area, name: &str) -> Result<(), Error> {
        self.inner
            .tmp
            .dir
            .rename(&self.name, &area.dir, name)
            .map_err(|err| area.error("rename a new file to", name, err))?;
        self.placed = true;
        area.sync()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.placed {
            // Best effort: a file left behind is cleared when a store next opens.
            let _ = self.inner.tmp.remove(&self.name);
        }
    }
}
