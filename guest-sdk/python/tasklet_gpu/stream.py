"""Streams and events: ordered queues of a session's work beside its own, points in them to wait
on from other streams, and the device time between two points."""

from . import elements
from .errors import InvalidArgument, InvalidInput, host


class Stream:
    """An ordered queue of a session's work, from `session.stream()`: launches
    (`session.launch(kernel).on(stream)`), writes, copies and reads queued on it run in the order
    made; work of different streams is ordered only by `Event`s (`wait`).

        copies, compute = session.stream(), session.stream()
        written = session.event()
        copies.write(x, values)
        copies.record(written)
        compute.wait(written)
        session.launch(kernel).on(compute).config(cfg).arg(x).arg(gpu.u32(n)).run()
        compute.synchronize()

    At most 16 streams a session (the host refuses more with `InvalidArgument`)."""

    def __init__(self, session, raw):
        self.session = session
        self.raw = raw

    def _owns(self, thing, what):
        if thing.session is not self.session:
            raise InvalidArgument(f"the {what} belongs to another session")

    def write(self, dst, values, offset=0):
        """Writes `values` (an `array`, `bytes`, or a list of numbers) into `dst` from element
        `offset`, queued on this stream."""
        self._owns(dst, "destination buffer")
        data = elements.to_bytes(values, dst.elem)
        byte_offset, _ = dst._byte_span(offset, len(data) // elements.size_of(dst.elem))
        if data:
            host(self.raw.mem_write, dst.raw, byte_offset, data)

    def copy(self, dst, src, dst_offset=0, start=0, stop=None):
        """Copies elements `start` to `stop` (exclusive; the end when `None`) of `src` into `dst`
        from element `dst_offset` on, queued on this stream (one element type)."""
        self._owns(dst, "destination buffer")
        self._owns(src, "source buffer")
        if dst.elem != src.elem:
            raise InvalidInput(f"cannot copy {src.elem} into {dst.elem}")
        stop = len(src) if stop is None else stop
        src_offset, nbytes = src._byte_span(start, stop - start)
        dst_byte_offset, _ = dst._byte_span(dst_offset, stop - start)
        if nbytes:
            host(self.raw.mem_copy, dst.raw, dst_byte_offset, src.raw, src_offset, nbytes)

    def read(self, src, start=0, stop=None):
        """Elements `start` to `stop` (exclusive; the end when `None`) of `src`, as an `array`,
        after all earlier work of this stream."""
        self._owns(src, "source buffer")
        stop = len(src) if stop is None else stop
        byte_offset, nbytes = src._byte_span(start, stop - start)
        data = host(self.raw.mem_read, src.raw, byte_offset, nbytes) if nbytes else b""
        return elements.from_bytes(data, src.elem)

    def record(self, event):
        """Records `event` after the work queued on this stream so far."""
        self._owns(event, "event")
        host(self.raw.record, event.raw)

    def wait(self, event):
        """Later work of this stream waits for the work before `event`'s latest record."""
        self._owns(event, "event")
        host(self.raw.wait, event.raw)

    def synchronize(self):
        """Waits for all work of this stream, and reports the first error of the session's work
        queued since the last wait."""
        host(self.raw.synchronize)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False


class Event:
    """A point in a stream's work, from `session.event()`: recorded with `Stream.record`, waited on
    by other streams, queried, and timed against another event. At most 64 events a session."""

    def __init__(self, session, raw):
        self.session = session
        self.raw = raw

    def query(self):
        """Whether the work before the latest record has completed (`True` if never recorded)."""
        return host(self.raw.query)

    def synchronize(self):
        """Waits for the work before the latest record."""
        host(self.raw.synchronize)

    def elapsed_ns_since(self, start):
        """The device time, in nanoseconds, of the lease's work between the latest records of
        `start` and this event (the Rust SDK's `elapsed_since`). Both must be recorded, `start`
        first."""
        if start.session is not self.session:
            raise InvalidArgument("the start event belongs to another session")
        return host(self.raw.elapsed_since, start.raw)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.__exit__(*exc)
        return False
