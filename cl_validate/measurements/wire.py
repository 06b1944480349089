"""How measurements and messages travel between processes, and lie in the cache: typed data
only, in frames of bounded size.

A case process runs a model's code, so what it sends is untrusted: the parent never unpickles it,
never executes it, and never blocks on it. Every message is a dataclass of known fields
encoded with msgpack (``msgspec``) and decoded against its declared type — anything else
(stray bytes a model wrote on the pipe, a truncated frame, a field of the wrong type) is a
`WireError` for the case that sent it, never a crash or a hang of the run. NumPy arrays (the
outputs numerics compares) travel as their dtype, shape and raw bytes; only plain numeric
dtypes are accepted.

A frame is an 8-byte big-endian length and the message. `FrameReader` takes bytes as they
arrive on a non-blocking pipe and yields whole frames; a frame longer than its limit is
refused as soon as its length is read, before it is buffered.

A control message that carries a case (its spec is as large as its case file) does not fit
in one socket packet (about 208 kB by default on Linux): it travels in a file of its own
(`message_file`, an anonymous in-memory file), passed as a descriptor beside the packet.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import numpy as np

T = TypeVar("T")

#: The largest frame a reader accepts: a measurement carries every output of every sample
#: (TVM's, PyTorch's and the float64 reference), which reaches hundreds of MB for a large
#: segmentation output at several sizes and seeds.
MAX_FRAME = 1 << 30
_LENGTH = struct.Struct(">Q")
_ARRAY = 1  # msgpack extension code of an ndarray
#: dtypes an array on the wire may have: numbers and booleans (never Python objects)
_KINDS = frozenset("biufc")


class WireError(ValueError):
    """Bytes that are not a well-formed message of the expected type."""


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        if a.dtype.kind not in _KINDS:
            raise TypeError(f"an array of dtype {a.dtype} cannot travel")
        head = msgspec.msgpack.encode((a.dtype.str, a.shape))
        return msgspec.msgpack.Ext(_ARRAY, _LENGTH.pack(len(head)) + head + a.tobytes())
    if isinstance(obj, np.generic):
        return obj.item()
    for plain in (str, bool, int, float):  # subclasses (TVM's String): as the plain value
        if isinstance(obj, plain):
            return plain(obj)
    raise TypeError(f"{type(obj).__name__} cannot travel")


def _ext_hook(code: int, data: memoryview) -> Any:
    if code != _ARRAY:
        raise WireError(f"unknown extension type {code}")
    try:
        (n,) = _LENGTH.unpack_from(data)
        dtype_str, shape = msgspec.msgpack.decode(data[8:8 + n], type=tuple[str, tuple[int, ...]])
        dtype = np.dtype(dtype_str)
    except (struct.error, msgspec.DecodeError, TypeError, ValueError) as exc:
        raise WireError(f"malformed array header: {exc}") from None
    if dtype.kind not in _KINDS or any(d < 0 for d in shape):
        raise WireError(f"an array of dtype {dtype} and shape {shape} is refused")
    body = data[8 + n:]
    if len(body) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise WireError("an array's bytes do not match its shape")
    # A view of the message (no copy): it keeps the message's buffer alive, which nothing
    # else writes to (FrameReader hands each buffer over once).
    return np.frombuffer(body, dtype=dtype).reshape(shape)


def _dec_hook(kind: type, obj: Any) -> Any:
    if kind is Path:
        if not isinstance(obj, str):
            raise WireError("a path must be a string")
        return Path(obj)
    if kind is np.ndarray:
        if not isinstance(obj, np.ndarray):
            raise WireError("expected an array")
        return obj
    raise NotImplementedError(kind)


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)


def encode(obj: Any) -> bytes:
    """`obj` (a dataclass of known fields) as msgpack."""
    return _ENCODER.encode(obj)


def decode(data: bytes | memoryview, kind: type[T]) -> T:
    """`data` as a `kind`, or `WireError`."""
    try:
        return msgspec.msgpack.decode(data, type=kind, dec_hook=_dec_hook, ext_hook=_ext_hook)
    except WireError:
        raise
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as exc:
        raise WireError(str(exc).splitlines()[0][:300] or type(exc).__name__) from None


def frame(obj: Any) -> bytes:
    """`obj` encoded, with its length in front."""
    payload = encode(obj)
    return _LENGTH.pack(len(payload)) + payload


def write_all(fd: int, data: bytes) -> None:
    """Every byte of `data` to `fd` (a blocking pipe), however many writes it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, limit: int = MAX_FRAME) -> bytes | None:
    """The next whole frame's message from `fd` (a blocking pipe), or None at its end; a
    frame over `limit` is a `WireError` before any of it is read."""
    head = _read_exact(fd, _LENGTH.size)
    if head is None:
        return None
    (n,) = _LENGTH.unpack(head)
    if n > limit:
        raise WireError(f"a message of {n} bytes, over the {limit >> 20} MB limit")
    return _read_exact(fd, n)


class FrameReader:
    """Whole frames out of bytes that arrive in pieces; refuses a frame over `limit` bytes
    (the length is checked as soon as it is read, so nothing that large is ever buffered)."""

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self.limit = limit
        self._buf = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes | memoryview]:
        """Each whole frame's message. A frame that ends the bytes received (a result,
        usually) is handed over without a copy: a view of the buffer, which this reader
        then lets go of; a large result costs its size once, not three times."""
        self._buf += data
        while len(self._buf) >= _LENGTH.size:
            (n,) = _LENGTH.unpack_from(self._buf)
            if n > self.limit:
                raise WireError(f"a message of {n} bytes, over the {self.limit >> 20} MB limit")
            end = _LENGTH.size + n
            if len(self._buf) < end:
                return
            if len(self._buf) == end:
                whole, self._buf = self._buf, bytearray()
                yield memoryview(whole)[_LENGTH.size:]
                return
            yield bytes(self._buf[_LENGTH.size:end])
            del self._buf[:end]

    @property
    def pending(self) -> int:
        """Bytes of a frame not complete yet."""
        return len(self._buf)


def message_file(payload: bytes) -> int:
    """A descriptor of an anonymous file holding `payload`, at its start: a message of any
    size, passed beside a socket packet (`read_message_file` on the other side)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("cl-validate-message", os.MFD_CLOEXEC)
    else:  # pragma: no cover - not Linux
        fd = os.dup(tempfile.TemporaryFile().fileno())
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_message_file(fd: int, limit: int = MAX_FRAME) -> bytes:
    """The message `message_file` wrote, read from its start; `WireError` over `limit`."""
    size = os.fstat(fd).st_size
    if size > limit:
        raise WireError(f"a message of {size} bytes, over the {limit >> 20} MB limit")
    chunks, read = [], 0
    while read < size:
        chunk = os.pread(fd, size - read, read)
        if not chunk:
            break
        chunks.append(chunk)
        read += len(chunk)
    return b"".join(chunks)
