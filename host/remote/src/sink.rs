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

/// A tasklet's bytes, filled from the start, exactly.
pub(crate) struct Guest {
    dst: GuestBytes,
    at: usize,
}

impl Guest {
    pub fn new(dst: GuestBytes) -> Guest {
        Guest { dst, at: 0 }
    }

    /// Whether every byte was filled.
    pub fn full(&self) -> bool {
        self.at == self.dst.len()
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
