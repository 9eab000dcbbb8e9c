//! Appends fields to a frame body, checking each length against the limit a receiver applies.

use crate::error::EncodeError;

/// Writes fields at the end of a buffer. Lengths over their limit are an [`EncodeError`]: what a
/// conforming receiver would reject is never sent.
pub(crate) struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut Vec<u8>) -> Writer<'a> {
        Writer { out }
    }

    pub(crate) fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    pub(crate) fn u16(&mut self, value: u16) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub(crate) fn i32(&mut self, value: i32) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub(crate) fn i64(&mut self, value: i64) {
        self.out.extend_from_slice(&value.to_be_bytes());
    }

    pub(crate) fn bool(&mut self, value: bool) {
        self.u8(value.into());
    }

    /// A `u32` length then the bytes.
    pub(crate) fn bytes(
        &mut self,
        field: &'static str,
        data: &[u8],
        limit: usize,
    ) -> Result<(), EncodeError> {
        let len = checked_len(field, data.len(), limit)?;
        self.u32(len);
        self.out.extend_from_slice(data);
        Ok(())
    }

    pub(crate) fn string(
        &mut self,
        field: &'static str,
        text: &str,
        limit: usize,
    ) -> Result<(), EncodeError> {
        self.bytes(field, text.as_bytes(), limit)
    }

    /// A list's `u32` item count.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        count: usize,
        limit: usize,
    ) -> Result<(), EncodeError> {
        let too_many = || EncodeError::TooManyItems {
            field,
            count: count as u64,
            limit: limit as u64,
        };
        if count > limit {
            return Err(too_many());
        }
        self.u32(u32::try_from(count).map_err(|_| too_many())?);
        Ok(())
    }
}

fn checked_len(field: &'static str, len: usize, limit: usize) -> Result<u32, EncodeError> {
    let too_long = || EncodeError::FieldTooLong {
        field,
        len: len as u64,
        limit: limit as u64,
    };
    if len > limit {
        return Err(too_long());
    }
    u32::try_from(len).map_err(|_| too_long())
}
