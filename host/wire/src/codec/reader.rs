//! A bounds-checked walk over one frame body.

use crate::error::DecodeError;

/// Reads fields from the front of a frame body. Every method either returns a value and moves on
/// or returns the [`DecodeError`] naming the field; none allocates more than the body holds.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Reader<'a> {
        Reader { rest: body }
    }

    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if len > self.rest.len() {
            return Err(DecodeError::Truncated { field });
        }
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, field)?;
        // `take` returned exactly N bytes.
        Ok(bytes.try_into().unwrap_or([0; N]))
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// One byte, 0 or 1.
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::InvalidValue {
                field,
                value: other.into(),
            }),
        }
    }

    /// An option's presence byte, 0 (absent) or 1 (present).
    pub(crate) fn present(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        self.bool(field)
    }

    /// A `u32` length, checked against `limit`, then that many bytes.
    pub(crate) fn bytes(
        &mut self,
        field: &'static str,
        limit: usize,
    ) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(field)?;
        if u64::from(len) > limit as u64 {
            return Err(DecodeError::FieldTooLong {
                field,
                len: len.into(),
                limit: limit as u64,
            });
        }
        self.take(len as usize, field)
    }

    /// As [`Reader::bytes`], and valid UTF-8.
    pub(crate) fn string(
        &mut self,
        field: &'static str,
        limit: usize,
    ) -> Result<String, DecodeError> {
        let bytes = self.bytes(field, limit)?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.to_owned()),
            Err(_) => Err(DecodeError::InvalidUtf8 { field }),
        }
    }

    /// A list's `u32` item count, checked against `limit`, and against the bytes left given that
    /// each item takes at least `min_item_bytes`: a caller may reserve that many items.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        limit: usize,
        min_item_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(field)?;
        if u64::from(count) > limit as u64 {
            return Err(DecodeError::TooManyItems {
                field,
                count: count.into(),
                limit: limit as u64,
            });
        }
        let count = count as usize;
        if count.saturating_mul(min_item_bytes.max(1)) > self.rest.len() {
            return Err(DecodeError::Truncated { field });
        }
        Ok(count)
    }

    /// The end of the body: nothing may follow the last field.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                count: self.rest.len(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_big_endian() {
        let body = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        let mut r = Reader::new(&body);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert_eq!(r.u16("b").unwrap(), 0x0203);
        assert_eq!(r.u32("c").unwrap(), 0x0405_0607);
        assert_eq!(r.u64("d").unwrap(), 0x0809_0A0B_0C0D_0E0F);
        r.finish().unwrap();
    }

    #[test]
    fn length_checked_before_the_bytes_are_looked_for() {
        // A 4 GiB length with no bytes behind it: the limit, not the missing bytes, is named.
        let body = [0xFF, 0xFF, 0xFF, 0xFF];
        let err = Reader::new(&body).bytes("ptx", 16).unwrap_err();
        assert_eq!(
            err,
            DecodeError::FieldTooLong {
                field: "ptx",
                len: 0xFFFF_FFFF,
                limit: 16
            }
        );
        let err = Reader::new(&body).count("kernels", 8, 1).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TooManyItems {
                field: "kernels",
                count: 0xFFFF_FFFF,
                limit: 8
            }
        );
    }

    #[test]
    fn within_limit_but_missing_is_truncated() {
        let body = [0, 0, 0, 5, b'a', b'b'];
        assert_eq!(
            Reader::new(&body).bytes("name", 16).unwrap_err(),
            DecodeError::Truncated { field: "name" }
        );
        let body = [0, 0, 0, 3, 0];
        assert_eq!(
            Reader::new(&body).count("args", 16, 1).unwrap_err(),
            DecodeError::Truncated { field: "args" }
        );
        // Three items of at least 2 bytes need 6 bytes.
        let body = [0, 0, 0, 3, 0, 0, 0, 0, 0];
        assert_eq!(
            Reader::new(&body).count("args", 16, 2).unwrap_err(),
            DecodeError::Truncated { field: "args" }
        );
        assert_eq!(Reader::new(&body).count("args", 16, 1), Ok(3));
        assert_eq!(
            Reader::new(&[0, 1]).u32("x").unwrap_err(),
            DecodeError::Truncated { field: "x" }
        );
    }

    #[test]
    fn bools_and_utf8() {
        assert_eq!(
            Reader::new(&[2]).bool("flag").unwrap_err(),
            DecodeError::InvalidValue {
                field: "flag",
                value: 2
            }
        );
        let body = [0, 0, 0, 2, 0xC3, 0x28];
        assert_eq!(
            Reader::new(&body).string("name", 8).unwrap_err(),
            DecodeError::InvalidUtf8 { field: "name" }
        );
    }

    #[test]
    fn trailing_bytes() {
        let mut r = Reader::new(&[0, 1, 2]);
        r.u8("a").unwrap();
        assert_eq!(
            r.finish().unwrap_err(),
            DecodeError::TrailingBytes { count: 2 }
        );
    }
}
