//! The primitives every message body is built from: big-endian integers, length-prefixed bytes
//! and strings, counted lists, each read with its limit checked before anything is taken.

mod reader;
mod writer;

pub(crate) use reader::Reader;
pub(crate) use writer::Writer;
