//! Typed device buffers, and the element-to-byte arithmetic behind them.

use core::marker::PhantomData;
use core::mem::size_of;
use core::ops::{Bound, Range, RangeBounds};

use bytemuck::Pod;

use crate::error::{Error, Result};
use crate::raw::sessions as raw;
use crate::session::Session;

/// Device memory holding `len` elements of `T`, usable only in the session that allocated it
/// (which it borrows, so it cannot outlive it). Dropping it frees the memory.
///
/// Offsets and ranges are in elements, here and everywhere else in the SDK (a name says `byte`
/// where a value is in bytes: [`DeviceBuffer::size_bytes`], [`DeviceBuffer::byte_offset`],
/// [`Launch::arg_at_byte`](crate::Launch::arg_at_byte)); the SDK converts them to bytes with
/// checked arithmetic, and checks them against the buffer's length before calling the host.
///
/// ```no_run
/// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
/// let buf = session.alloc::<f32>(1024)?;       // zeroed
/// buf.write(10, &[1.0, 2.0, 3.0])?;            // elements 10..13
/// assert_eq!(buf.read_range(9..13)?, [0.0, 1.0, 2.0, 3.0]);
/// assert_eq!(buf.len(), 1024);
/// assert_eq!(buf.size_bytes(), 4096);
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[derive(Debug)]
pub struct DeviceBuffer<'s, T: Pod> {
    session: &'s Session<'s>,
    raw: raw::Buffer,
    len: usize,
    _elem: PhantomData<T>,
}

impl<'s, T: Pod> DeviceBuffer<'s, T> {
    pub(crate) fn new(session: &'s Session<'s>, raw: raw::Buffer, len: usize) -> Self {
        DeviceBuffer {
            session,
            raw,
            len,
            _elem: PhantomData,
        }
    }

    /// Wraps a WIT buffer handle of `session`; its size must be a whole number of `T`s.
    pub fn from_raw(session: &'s Session<'s>, raw: raw::Buffer) -> Result<Self> {
        let bytes = raw.size();
        let elem = size_of::<T>() as u64;
        if elem == 0 || !bytes.is_multiple_of(elem) {
            return Err(Error::invalid_input(format!(
                "a buffer of {bytes} bytes does not hold a whole number of {elem}-byte elements"
            )));
        }
        let len = usize::try_from(bytes / elem).map_err(|_| {
            Error::invalid_input(format!("a buffer of {bytes} bytes is too large to address"))
        })?;
        Ok(DeviceBuffer::new(session, raw, len))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        // Checked when the buffer was made.
        self.len as u64 * size_of::<T>() as u64
    }

    /// The byte offset of element `index` (which may be `len()`, the end).
    pub fn byte_offset(&self, index: usize) -> Result<u64> {
        byte_span::<T>(index, 0, self.len).map(|(off, _)| off)
    }

    /// Writes `data` to elements `elem_offset .. elem_offset + data.len()`. May return before the
    /// copy completes; its errors surface at the next sync at the latest.
    pub fn write(&self, elem_offset: usize, data: &[T]) -> Result<()> {
        let (off, _) = byte_span::<T>(elem_offset, data.len(), self.len)?;
        if data.is_empty() {
            return Ok(());
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        Ok(self.session.raw().mem_write(&self.raw, off, bytes)?)
    }

    /// Reads the whole buffer, after all earlier work of the session.
    pub fn read(&self) -> Result<Vec<T>> {
        self.read_range(..)
    }

    /// Reads the elements in `range`, after all earlier work of the session.
    pub fn read_range(&self, range: impl RangeBounds<usize>) -> Result<Vec<T>> {
        let r = elem_range(range, self.len)?;
        let (off, len) = byte_span::<T>(r.start, r.end - r.start, self.len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.session.raw().mem_read(&self.raw, off, len)?;
        if bytes.len() as u64 != len {
            return Err(Error::invalid_input(format!(
                "the host returned {} bytes for a read of {len}",
                bytes.len()
            )));
        }
        // The bytes come from the allocator with alignment 1; copy them into `T`s.
        let mut out = vec![T::zeroed(); r.end - r.start];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }

    /// Fills `dst` with the buffer's first `dst.len()` elements, after all earlier work of the
    /// session. The host writes straight into `dst` (large reads land there from the device in
    /// one copy, with no allocation on either side), so reading into a buffer kept across calls
    /// is the fast way to read large data.
    ///
    /// ```no_run
    /// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
    /// let buf = session.alloc_from(&[1u32, 2, 3, 4])?;
    /// let mut out = [0u32; 3];
    /// buf.read_into(&mut out)?;
    /// assert_eq!(out, [1, 2, 3]);
    /// # Ok::<(), tasklet_gpu::Error>(())
    /// ```
    pub fn read_into(&self, dst: &mut [T]) -> Result<()> {
        self.read_range_into(0, dst)
    }

    /// Fills `dst` with elements `elem_offset .. elem_offset + dst.len()`, in place (as
    /// [`read_into`]).
    ///
    /// [`read_into`]: DeviceBuffer::read_into
    pub fn read_range_into(&self, elem_offset: usize, dst: &mut [T]) -> Result<()> {
        let (off, _) = byte_span::<T>(elem_offset, dst.len(), self.len)?;
        if dst.is_empty() {
            return Ok(());
        }
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(dst);
        Ok(crate::read_into::mem_read_into(
            self.session.raw(),
            &self.raw,
            off,
            bytes,
        )?)
    }

    /// The session the buffer belongs to.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Buffer {
        &self.raw
    }
}

/// Bytes of `count` elements of `T`; [`Error::InvalidInput`] on overflow.
pub(crate) fn byte_len<T>(count: usize) -> Result<u64> {
    (count as u64)
        .checked_mul(size_of::<T>() as u64)
        .ok_or_else(|| {
            Error::invalid_input(format!(
                "{count} elements of {} bytes overflow a 64-bit byte count",
                size_of::<T>()
            ))
        })
}

/// Checks that elements `offset .. offset + count` lie within `len` elements and returns them as
/// (byte offset, byte length).
pub(crate) fn byte_span<T>(offset: usize, count: usize, len: usize) -> Result<(u64, u64)> {
    let end = offset.checked_add(count).ok_or_else(|| {
        Error::invalid_input(format!("element range {offset} + {count} overflows"))
    })?;
    if end > len {
        return Err(Error::OutOfBounds(format!(
            "elements {offset}..{end} fall outside a buffer of {len} elements"
        )));
    }
    Ok((byte_len::<T>(offset)?, byte_len::<T>(count)?))
}

/// Resolves `range` against a buffer of `len` elements.
pub(crate) fn elem_range(range: impl RangeBounds<usize>, len: usize) -> Result<Range<usize>> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s
            .checked_add(1)
            .ok_or_else(|| Error::invalid_input("range start overflows"))?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e
            .checked_add(1)
            .ok_or_else(|| Error::invalid_input("range end overflows"))?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if end > len || start > len {
        return Err(Error::OutOfBounds(format!(
            "elements {start}..{end} fall outside a buffer of {len} elements"
        )));
    }
    if start > end {
        return Err(Error::invalid_input(format!(
            "range {start}..{end} is reversed"
        )));
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn byte_len_multiplies_and_checks() {
        assert_eq!(byte_len::<u32>(10).unwrap(), 40);
        assert_eq!(byte_len::<f64>(0).unwrap(), 0);
        assert_eq!(byte_len::<[u8; 3]>(5).unwrap(), 15);
        // usize::MAX elements of 16 bytes overflow u64 on 64-bit targets (and not on wasm32).
        if size_of::<usize>() == 8 {
            assert_eq!(
                byte_len::<u128>(usize::MAX).unwrap_err().kind(),
                ErrorKind::InvalidInput
            );
        }
        assert_eq!(byte_len::<u8>(usize::MAX).unwrap(), usize::MAX as u64);
    }

    #[test]
    fn byte_span_checks_bounds() {
        assert_eq!(byte_span::<u32>(2, 3, 5).unwrap(), (8, 12));
        assert_eq!(byte_span::<u32>(5, 0, 5).unwrap(), (20, 0));
        assert_eq!(byte_span::<u32>(0, 0, 0).unwrap(), (0, 0));
        assert_eq!(
            byte_span::<u32>(3, 3, 5).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            byte_span::<u32>(6, 0, 5).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            byte_span::<u32>(usize::MAX, 1, 5).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            byte_span::<u32>(1, usize::MAX, 5).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn elem_range_resolves_bounds() {
        assert_eq!(elem_range(.., 7).unwrap(), 0..7);
        assert_eq!(elem_range(2.., 7).unwrap(), 2..7);
        assert_eq!(elem_range(..3, 7).unwrap(), 0..3);
        assert_eq!(elem_range(1..=3, 7).unwrap(), 1..4);
        assert_eq!(elem_range(7..7, 7).unwrap(), 7..7);
        assert_eq!(
            elem_range((Bound::Excluded(1), Bound::Unbounded), 7).unwrap(),
            2..7
        );
        assert_eq!(
            elem_range(0..8, 7).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        assert_eq!(
            elem_range(8.., 7).unwrap_err().kind(),
            ErrorKind::OutOfBounds
        );
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = elem_range(5..3, 7);
        assert_eq!(reversed.unwrap_err().kind(), ErrorKind::InvalidInput);
        assert_eq!(
            elem_range(..=usize::MAX, 7).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
}
