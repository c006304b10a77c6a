"""numpy scalars and arrays, bit-exact.

numpy is only touched for values whose type comes from numpy, so it is never imported just to
encode or decode plain data. Arrays keep dtype (including byte order), shape and the raw bytes;
object arrays keep their elements, encoded like any other value.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

from agentreplay_core._codec_base import TAG, CodecFailure, Json, type_name
from agentreplay_core._codec_scalars import b64, unb64

Encoder = Callable[[Any, int], Json]
#: most elements an array of zero-size items (`|S0`, `<U0`) may claim when decoded
_MAX_EMPTY_ITEMS = 1 << 20


def _unsupported(v: Any, why: str) -> CodecFailure:
    return CodecFailure(
        f"cannot encode {type_name(v)}: {why}; convert it (e.g. np.asarray or .tolist()) or "
        "register an encoder with agentreplay_core.register_type()",
        type_name(v),
    )


def _raw_bytes(np: Any, v: Any) -> bytes:
    """C-order bytes; the unused padding of x87 extended floats is zeroed, as it is garbage."""
    dtype = v.dtype
    if dtype.kind in "fc" and np.finfo(dtype).nmant == 63 and sys.byteorder == "little":
        part = dtype.itemsize // (2 if dtype.kind == "c" else 1)
        cells = np.frombuffer(bytearray(v.tobytes(order="C")), dtype=np.uint8)
        cells = cells.reshape(-1, part)
        # 64-bit mantissa + 16-bit sign/exponent; the rest is padding (leading if swapped)
        if dtype.byteorder == ">":
            cells[:, : part - 10] = 0
        else:
            cells[:, 10:] = 0
        return bytes(cells.tobytes())
    raw: bytes = v.tobytes(order="C")
    return raw


def encode_numpy(v: Any, depth: int, enc: Encoder) -> Json:
    """Tagged form of a numpy array or scalar (`depth` = level of the container holding it)."""
    np: Any = sys.modules["numpy"]
    if isinstance(v, np.ndarray):
        if type(v) is not np.ndarray:
            raise _unsupported(v, "array subclasses (masked arrays, matrices) are not kept")
        dtype = v.dtype
        shape = list(v.shape)
        if dtype.kind == "O":
            items: list[Json] = []
            try:
                for item in v.ravel(order="C"):
                    items.append(enc(item, depth + 2))
            except CodecFailure as failure:
                failure.add(f"[{len(items)}]", v)  # flat index of the failing element
                raise
            return {TAG: "ndarray", "dtype": "|O", "shape": shape, "items": items}
        if dtype.fields is not None or dtype.kind == "V":
            raise _unsupported(v, "structured dtypes are not supported")
        return {TAG: "ndarray", "dtype": dtype.str, "shape": shape, "b64": b64(_raw_bytes(np, v))}
    if isinstance(v, np.generic):
        dtype = v.dtype
        if dtype.fields is not None or dtype.kind in "VO":
            raise _unsupported(v, "structured scalars are not supported")
        raw = _raw_bytes(np, v)
        if dtype.kind in "biufc":
            # readable when the plain Python value rebuilds the very same bits
            item = v.item()
            if type(item) in (bool, int, float, complex) and \
                    _raw_bytes(np, dtype.type(item)) == raw:
                return {TAG: "npscalar", "dtype": dtype.str, "v": enc(item, depth + 1)}
        return {TAG: "npscalar", "dtype": dtype.str, "b64": b64(raw)}
    raise _unsupported(v, "only numpy arrays and scalars are supported")


def _numpy() -> Any:
    try:
        return importlib.import_module("numpy")
    except ImportError as exc:
        raise CodecFailure("the value holds numpy data but numpy is not installed; "
                           "install numpy to decode it") from exc


def _dtype(np: Any, text: Any) -> Any:
    dtype = np.dtype(text)
    if dtype.hasobject and text != "|O":
        raise ValueError(f"refusing object dtype {text!r} for raw bytes")
    return dtype


def decode_array(d: dict[str, Any], items: list[Any] | None) -> Any:
    """Rebuild an ndarray; `items` are the decoded elements of an object array."""
    np = _numpy()
    shape = tuple(int(n) for n in d["shape"])
    if items is not None:
        flat = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            flat[i] = item  # element-wise, so nested lists stay elements
        return flat.reshape(shape)
    dtype = _dtype(np, d["dtype"])
    if dtype.hasobject:
        raise ValueError("object arrays carry 'items', not raw bytes")
    raw = unb64(d["b64"])
    if dtype.itemsize == 0:
        # no bytes to check the shape against, and numpy stores such items in one byte or
        # more: a damaged shape must not allocate gigabytes
        if math.prod(shape) > _MAX_EMPTY_ITEMS:
            raise ValueError(f"shape {list(shape)} of zero-size items is implausibly large")
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def decode_scalar(d: dict[str, Any], value: Any) -> Any:
    """Rebuild a numpy scalar from its decoded readable value or its raw bytes."""
    np = _numpy()
    dtype = _dtype(np, d["dtype"])
    if dtype.hasobject:
        raise ValueError("numpy scalars cannot have an object dtype")
    if "b64" in d:
        if dtype.itemsize == 0:  # b"" and "" scalars: nothing to read
            return dtype.type()
        return np.frombuffer(unb64(d["b64"]), dtype=dtype)[0]
    if dtype.kind not in "biufc":
        # only numbers are written readably; `np.bytes_(n)` and `np.void(n)` would allocate n
        # bytes, so a damaged dtype must not reach them
        raise ValueError(f"a numpy scalar of dtype {dtype.str} carries raw bytes, not 'v'")
    return dtype.type(value)
