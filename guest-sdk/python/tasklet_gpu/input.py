"""Reading a tasklet's input bytes in the usual shapes, with errors (`InvalidInput`) that quote
the word that did not parse, worded as the Rust SDK words them."""

from .errors import InvalidInput, quote

U32_MAX = 0xFFFF_FFFF


def text(data):
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"the input is not UTF-8 ({e.reason})") from None


def count_or(data, default):
    """A decimal element count (0 to 2^32-1), or `default` when the input is only whitespace."""
    word = text(data).strip()
    if not word:
        return default
    if word.isascii() and word.isdigit() and int(word) <= U32_MAX:
        return int(word)
    raise InvalidInput(f"{quote(word)} is not an element count from 0 to {U32_MAX}")


def numbers(data, kind=float):
    """Whitespace-separated numbers, each converted by `kind` (`float` or `int`)."""
    out = []
    for word in text(data).split():
        try:
            out.append(kind(word))
        except ValueError:
            raise InvalidInput(f"{quote(word)} is not a number") from None
    return out
