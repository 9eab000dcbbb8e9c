//! Run ids: 128 random bits from the operating system, so that knowing one run's id tells
//! nothing about another's.

use std::fmt;

use crate::error::Error;

/// The id of one run, spelled as 32 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunId([u8; 16]);

impl RunId {
    /// A fresh id from the operating system's random source.
    pub(crate) fn random() -> Result<RunId, Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| Error::Entropy(e.to_string()))?;
        Ok(RunId(bytes))
    }

    /// The id's 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({self})")
    }
}
