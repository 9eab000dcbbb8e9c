//! Where a reply's streamed data goes as it arrives: a buffer of its own (`mem-read`), or the
//! tasklet's memory in place (`mem-read-into`, which then costs no buffer and no second copy).

use crate::error::ClientError;
use tasklet_runtime::gpu::GuestBytes;
use tasklet_runtime::large_buffer;

pub(crate) trait Sink {
    /// The reply streams `len` bytes; an error when they cannot go here.
    fn expect(&mut self, len: u64) -> Result<(), ClientError>;
    /// The next of them.
    fn put(&mut self, bytes: &[u8]) -> Result<(), ClientError>;
}

impl Sink for Vec<u8> {
    fn expect(&mut self, len: u64) -> Result<(), ClientError> {
        *self = large_buffer::with_capacity(usize::try_from(len).unwrap_or(0));
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Where the parts of a read spread over several streams go (see `channel::spread`): each part's
/// bytes at their own place, the parts in any order.
pub(crate) trait Spread {
    /// Puts `bytes` at `at`; an error when they do not fit.
    fn put_at(&mut self, at: usize, bytes: &[u8]) -> Result<(), ClientError>;
}

/// Bytes already as long as the read (`large_buffer::zeroed`, which costs no write).
impl Spread for Vec<u8> {
    fn put_at(&mut self, at: usize, bytes: &[u8]) -> Result<(), ClientError> {
        let end = at.checked_add(bytes.len()).filter(|end| *end <= self.len());
        let Some(end) = end else {
            return Err(ClientError::Protocol(format!(
                "the node answered a read of {} bytes with more",
                self.len()
            )));
        };
        self[at..end].copy_from_slice(bytes);
        Ok(())
    }
}

impl Spread for Guest {
    fn put_at(&mut self, at: usize, bytes: &[u8]) -> Result<(), ClientError> {
        self.dst
            .fill_at(at, bytes)
            .map_err(|err| ClientError::Setup(err.to_string()))?;
        self.spread += bytes.len();
        Ok(())
    }
}

/// A tasklet's bytes, filled from the start, exactly.
pub(crate) struct Guest {
    dst: GuestBytes,
    at: usize,
    /// Bytes put in parts ([`Spread`]).
    spread: usize,
}

impl Guest {
    pub fn new(dst: GuestBytes) -> Guest {
        Guest {
            dst,
            at: 0,
            spread: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.dst.len()
    }

    /// Whether every byte was filled (from the start, or in parts).
    pub fn full(&self) -> bool {
        self.at.max(self.spread) == self.dst.len()
    }
}

impl Sink for Guest {
    fn expect(&mut self, len: u64) -> Result<(), ClientError> {
        if len == self.dst.len() as u64 {
            return Ok(());
        }
        Err(ClientError::Protocol(format!(
            "the node answered a read of {} bytes with {len}",
            self.dst.len()
        )))
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.dst
            .fill_at(self.at, bytes)
            .map_err(|err| ClientError::Setup(err.to_string()))?;
        self.at += bytes.len();
        Ok(())
    }
}
