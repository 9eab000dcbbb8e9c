//! Where a tasklet's stdout and stderr go. A run on the user's own machine writes them to the
//! host's stderr; a run on someone else's machine (a node running a tenant's deployment) must
//! not: a tenant could fill the node's disk, or forge lines of its log. There each run's two
//! streams are kept in one buffer of bounded size, the rest counted, and the caller decides what
//! to do with them after the run (a node logs them, escaped, under the tenant and run id).
//!
//! The guest is never refused a write: past the bound its bytes are dropped and counted, so a
//! tasklet that prints a lot behaves the same wherever it runs (Rust's `eprintln!` panics on a
//! failed write).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// How a run's stdout and stderr are handled.
#[derive(Clone)]
pub enum GuestOutput {
    /// Both to the host's stderr: the tasklet's own operator reads them.
    Inherit,
    /// Both into this buffer, as far as its bound.
    Capture(CapturedOutput),
}

/// A bounded buffer both of a run's streams write into, in the order written.
#[derive(Clone)]
pub struct CapturedOutput {
    shared: Arc<Mutex<Captured>>,
}

/// What a run printed, as far as the bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes written (at most the bound).
    pub bytes: Vec<u8>,
    /// Bytes written past the bound, dropped.
    pub dropped: u64,
    /// The bound.
    limit: usize,
}

impl CapturedOutput {
    /// Keeps the first `limit` bytes written to either stream.
    pub fn new(limit: usize) -> CapturedOutput {
        CapturedOutput {
            shared: Arc::new(Mutex::new(Captured {
                bytes: Vec::new(),
                dropped: 0,
                limit,
            })),
        }
    }

    /// What was written so far; the buffer is empty again after.
    pub fn take(&self) -> Captured {
        let mut c = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let limit = c.limit;
        std::mem::replace(
            &mut *c,
            Captured {
                bytes: Vec::new(),
                dropped: 0,
                limit,
            },
        )
    }

    fn append(&self, bytes: &[u8]) {
        let mut c = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let room = c.limit.saturating_sub(c.bytes.len());
        let kept = bytes.len().min(room);
        c.bytes.extend_from_slice(&bytes[..kept]);
        c.dropped = c.dropped.saturating_add((bytes.len() - kept) as u64);
    }
}

/// Room the guest is told it may write at once: any amount is taken (and dropped past the
/// bound), so this only sizes the guest's chunks.
const WRITE_PERMIT: usize = 64 << 10;

impl OutputStream for CapturedOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(WRITE_PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CapturedOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_bytes_are_dropped_and_counted_and_take_empties_it() {
        let out = CapturedOutput::new(8);
        let mut stream = out.p2_stream();
        stream.write(bytes::Bytes::from_static(b"hello ")).unwrap();
        stream.write(bytes::Bytes::from_static(b"world\n")).unwrap();
        assert_eq!(stream.check_write().unwrap(), WRITE_PERMIT, "never refused");
        let c = out.take();
        assert_eq!(c.bytes, b"hello wo");
        assert_eq!(c.dropped, 4);
        assert_eq!(
            out.take(),
            Captured {
                limit: 8,
                ..Captured::default()
            }
        );
    }
}
