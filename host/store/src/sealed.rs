//! A complete file in `tmp/` whose digest is known: content waiting to take its name.

use crate::area::Area;
use crate::digest::Digest;
use crate::error::Error;
use crate::layout::digest_name;
use crate::temp::TempFile;

/// A written, synced temp file and the digest of its bytes.
pub(crate) struct Sealed {
    pub(crate) temp: TempFile,
    pub(crate) digest: Digest,
    pub(crate) len: u64,
}

impl Sealed {
    /// Gives the file its digest as its name in `area`; `true` if that content was already
    /// there, in which case the temp file is dropped and nothing changes.
    ///
    /// A file already there counts as this content when its length matches: its name is its
    /// digest, and reading it verifies that digest, removing it if damaged, so the next push
    /// restores it. A file of the wrong length is damaged for certain and is replaced now.
    ///
    /// The caller holds the namespace lock.
    pub(crate) fn place(self, area: &Area) -> Result<bool, Error> {
        let name = digest_name(&self.digest);
        match area.metadata(&name)? {
            Some(there) if there.is_file() && there.len() == self.len => Ok(true),
            Some(there) if there.is_dir() => Err(Error::NotAFile {
                path: area.path_of(&name),
            }),
            _ => {
                self.temp.place(area, &name)?;
                Ok(false)
            }
        }
    }
}
