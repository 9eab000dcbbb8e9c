//! Streams and events: ordered queues of a session's work beside its own, points in them to
//! wait on from other streams, and the device time between two points.

use core::ops::RangeBounds;

use bytemuck::Pod;

use crate::buffer::{byte_span, elem_range, DeviceBuffer};
use crate::error::{Error, Result};
use crate::raw::sessions as raw;
use crate::session::Session;

/// An ordered queue of a session's work, from [`Session::stream`]: launches
/// ([`Launch::on`](crate::Launch::on)), writes, copies and reads queued on it run in the order
/// made; work of different streams is ordered only by [`Event`]s ([`Stream::wait`]).
///
/// ```no_run
/// # let lease = tasklet_gpu::Lease::acquire(1 << 20, 10)?; let session = lease.session()?;
/// # let module = session.load_ptx("")?; let k = module.kernel("scale")?;
/// use tasklet_gpu::LaunchConfig;
/// let (copies, compute) = (session.stream()?, session.stream()?);
/// let written = session.event()?;
/// let x = session.alloc::<f32>(1024)?;
/// copies.write(&x, 0, &[1.0; 1024])?;
/// copies.record(&written)?;
/// compute.wait(&written)?;
/// session.launch_kernel(&k).on(&compute).config(LaunchConfig::for_num_elems(1024)).arg(&x).arg(1024u32).run()?;
/// compute.synchronize()?;
/// # Ok::<(), tasklet_gpu::Error>(())
/// ```
#[derive(Debug)]
pub struct Stream<'s> {
    session: &'s Session<'s>,
    raw: raw::GpuStream,
}

/// A point in a stream's work, from [`Session::event`]: recorded with [`Stream::record`], waited
/// on by other streams, queried, and timed against another event.
#[derive(Debug)]
pub struct Event<'s> {
    session: &'s Session<'s>,
    raw: raw::Event,
}

impl<'l> Session<'l> {
    /// A new stream of this session (at most 16 at once).
    pub fn stream(&self) -> Result<Stream<'_>> {
        Ok(Stream {
            session: self,
            raw: self.raw().new_stream()?,
        })
    }

    /// A new event of this session, not yet recorded (at most 64 at once).
    pub fn event(&self) -> Result<Event<'_>> {
        Ok(Event {
            session: self,
            raw: self.raw().new_event()?,
        })
    }
}

impl<'s> Stream<'s> {
    /// The session the stream belongs to.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::GpuStream {
        &self.raw
    }

    /// Writes `data` into `dst` from element `elem_offset` on, queued on this stream.
    pub fn write<T: Pod>(
        &self,
        dst: &DeviceBuffer<'_, T>,
        elem_offset: usize,
        data: &[T],
    ) -> Result<()> {
        self.session
            .check_owns(dst.session(), "destination buffer")?;
        let (off, _) = byte_span::<T>(elem_offset, data.len(), dst.len())?;
        if data.is_empty() {
            return Ok(());
        }
        Ok(self
            .raw
            .mem_write(dst.raw(), off, bytemuck::cast_slice(data))?)
    }

    /// Copies the elements `src_range` of `src` to `dst` from element `dst_elem_offset` on,
    /// queued on this stream.
    pub fn copy<T: Pod>(
        &self,
        dst: &DeviceBuffer<'_, T>,
        dst_elem_offset: usize,
        src: &DeviceBuffer<'_, T>,
        src_range: impl RangeBounds<usize>,
    ) -> Result<()> {
        self.session
            .check_owns(dst.session(), "destination buffer")?;
        self.session.check_owns(src.session(), "source buffer")?;
        let range = elem_range(src_range, src.len())?;
        let count = range.end - range.start;
        let (src_off, len) = byte_span::<T>(range.start, count, src.len())?;
        let (dst_off, _) = byte_span::<T>(dst_elem_offset, count, dst.len())?;
        if len == 0 {
            return Ok(());
        }
        Ok(self
            .raw
            .mem_copy(dst.raw(), dst_off, src.raw(), src_off, len)?)
    }

    /// Reads the elements `range` of `src`, after all earlier work of this stream.
    pub fn read<T: Pod>(
        &self,
        src: &DeviceBuffer<'_, T>,
        range: impl RangeBounds<usize>,
    ) -> Result<Vec<T>> {
        self.session.check_owns(src.session(), "source buffer")?;
        let r = elem_range(range, src.len())?;
        let (off, len) = byte_span::<T>(r.start, r.end - r.start, src.len())?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let bytes = self.raw.mem_read(src.raw(), off, len)?;
        if bytes.len() as u64 != len {
            return Err(Error::invalid_input(format!(
                "the host returned {} bytes for a read of {len}",
                bytes.len()
            )));
        }
        let mut out = vec![T::zeroed(); r.end - r.start];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
        Ok(out)
    }

    /// Records `event` after the work queued on this stream so far.
    pub fn record(&self, event: &Event<'_>) -> Result<()> {
        self.session.check_owns(event.session, "event")?;
        Ok(self.raw.record(&event.raw)?)
    }

    /// Later work of this stream waits for the work before `event`'s latest record.
    pub fn wait(&self, event: &Event<'_>) -> Result<()> {
        self.session.check_owns(event.session, "event")?;
        Ok(self.raw.wait(&event.raw)?)
    }

    /// Waits for all work of this stream, and reports the first error of the session's work
    /// queued since the last wait.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.raw.synchronize()?)
    }
}

impl<'s> Event<'s> {
    /// The session the event belongs to.
    pub fn session(&self) -> &'s Session<'s> {
        self.session
    }

    /// The underlying WIT handle.
    pub fn raw(&self) -> &raw::Event {
        &self.raw
    }

    /// Whether the work before the latest record has completed (true if never recorded).
    pub fn query(&self) -> Result<bool> {
        Ok(self.raw.query()?)
    }

    /// Waits for the work before the latest record.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.raw.synchronize()?)
    }

    /// The device time of the lease's work between the latest records of `start` and this
    /// event. Both must be recorded, `start` first.
    pub fn elapsed_since(&self, start: &Event<'_>) -> Result<core::time::Duration> {
        self.session.check_owns(start.session, "start event")?;
        Ok(core::time::Duration::from_nanos(
            self.raw.elapsed_since(&start.raw)?,
        ))
    }
}
