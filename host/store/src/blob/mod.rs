//! Blobs: content named by its SHA-256, written in streamed chunks and verified when read.

mod read;
mod write;

pub use read::BlobReader;
pub use write::{BlobWriter, Put};
