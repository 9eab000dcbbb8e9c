"""Typed device memory: a buffer of elements of one type, written from and read into `array`s."""

from . import elements
from .errors import InvalidInput, host


class DeviceBuffer:
    """Device memory of `len(buf)` elements of type `buf.elem`, usable in the session that
    allocated it. Offsets are in elements. Freed when dropped."""

    def __init__(self, session, raw, elem, count):
        self.session = session
        self.raw = raw
        self.elem = elem
        self._len = count

    def __len__(self):
        return self._len

    @property
    def size_bytes(self):
        return self._len * elements.size_of(self.elem)

    def _byte_span(self, start, count):
        if start < 0 or count < 0 or start + count > self._len:
            raise InvalidInput(
                f"elements {start}..{start + count} are outside a buffer of {self._len} {self.elem}"
            )
        size = elements.size_of(self.elem)
        return start * size, count * size

    def write(self, values, offset=0):
        """Writes `values` (an `array`, `bytes`, or a list of numbers) from element `offset`."""
        data = elements.to_bytes(values, self.elem)
        byte_offset, _ = self._byte_span(offset, len(data) // elements.size_of(self.elem))
        host(self.session.raw.mem_write, self.raw, byte_offset, data)

    def read(self):
        """The buffer's elements, as an `array`, after all earlier work of the session."""
        return self.read_range(0, self._len)

    def read_range(self, start, stop):
        """Elements `start` to `stop` (exclusive), as an `array`."""
        byte_offset, nbytes = self._byte_span(start, stop - start)
        data = host(self.session.raw.mem_read, self.raw, byte_offset, nbytes)
        return elements.from_bytes(data, self.elem)

    def at(self, index):
        """This buffer from element `index` on, as a kernel argument."""
        byte_offset, _ = self._byte_span(index, 0)
        return BufferAt(self, byte_offset)


class BufferAt:
    """A kernel argument pointing `byte_offset` bytes into a buffer (see `DeviceBuffer.at`)."""

    def __init__(self, buffer, byte_offset):
        self.buffer = buffer
        self.byte_offset = byte_offset
