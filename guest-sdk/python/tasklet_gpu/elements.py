"""Element types of device buffers and kernel scalars: names (`"u32"`) and the `array` typecodes
that hold them. Typecodes are chosen by size, since C's `long` is 4 bytes on wasm32."""

from array import array
from .errors import InvalidInput

# name -> (bytes, kind): kind "u" unsigned, "i" signed, "f" floating.
_TYPES = {
    "u8": (1, "u"), "i8": (1, "i"), "u16": (2, "u"), "i16": (2, "i"),
    "u32": (4, "u"), "i32": (4, "i"), "u64": (8, "u"), "i64": (8, "i"),
    "f32": (4, "f"), "f64": (8, "f"),
}


def _typecode(size, kind):
    candidates = {"u": "BHILQ", "i": "bhilq", "f": "fd"}[kind]
    return next(c for c in candidates if array(c).itemsize == size)


TYPECODE = {name: _typecode(size, kind) for name, (size, kind) in _TYPES.items()}

# Every numeric typecode's element type: "l" is i32 on wasm32, i64 elsewhere.
_NAME_OF = {
    code: ("f" if code in "fd" else "i" if code.islower() else "u") + str(8 * array(code).itemsize)
    for code in "bBhHiIlLqQfd"
}


def size_of(elem):
    """Bytes of one element of type `elem` (`"u32"`: 4)."""
    return _TYPES[check(elem)][0]


def check(elem):
    """`elem` if it names an element type; else `InvalidInput` listing them."""
    if elem not in _TYPES:
        raise InvalidInput(f"{elem!r} is not an element type; use one of {', '.join(_TYPES)}")
    return elem


def name_of(values):
    """The element type of an `array`; `bytes`-like values are `u8`."""
    if isinstance(values, array):
        name = _NAME_OF.get(values.typecode)
        if name is None:
            raise InvalidInput(f"an array of typecode {values.typecode!r} has no device element type")
        return name
    return "u8"


def to_bytes(values, elem):
    """The little-endian bytes of `values` (an `array`, `bytes`, or a list of numbers) as `elem`s."""
    if isinstance(values, (bytes, bytearray, memoryview)):
        return bytes(values)
    if isinstance(values, array):
        if name_of(values) != elem:
            values = array(TYPECODE[elem], values)
        return values.tobytes()
    try:
        return array(TYPECODE[check(elem)], values).tobytes()
    except (TypeError, OverflowError) as e:
        raise InvalidInput(f"cannot store these values as {elem}: {e}") from None


def from_bytes(data, elem):
    """An `array` of `elem`s read from little-endian `data`."""
    values = array(TYPECODE[elem])
    values.frombytes(data)
    return values
