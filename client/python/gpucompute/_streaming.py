"""Compute.StreamingCompute: element-wise operations over inputs of any size in one call.

The input goes out in chunks (whole rows where the operation needs them), views of the
caller's arrays framed by _wire with no copy of ours, while the result chunks come back into one array (or the
caller's ``out``, e.g. an ``np.lib.format.open_memmap`` file), each copied once, straight
to its place. The server holds a bounded number of chunks, so the input may be larger
than its memory or the GPU's; pass a ``numpy.memmap`` (or an iterator of chunks with
``shape=``) for inputs larger than this process's memory too.

With a striped client (``stripes`` > 1) an array input larger than ``stripe_bytes`` is cut
along its first axis into that many calls at once, one per stripe connection, each
writing its rows of the result in place; the first failure cancels the others.
"""
from __future__ import annotations

import math
import time
from typing import (TYPE_CHECKING, Any, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    Union, cast)

import numpy as np

from . import _wire
from ._operands import (NORMS, ArrayLike, as_array, byte_view, cast_operands, computing_dtype,
                        haversine_request, set_operand)
from ._pb import pb
from ._steps import Parallel, Steps, Stream
from ._stripe_workers import Out, stripe_step
from ._stream import ResultOptions, ResultStream
from ._types import DEFAULT_RADIUS_KM, NP_TO_PB, Array


#: input bytes per data message (all streamed operands of a chunk together)
DEFAULT_STREAM_CHUNK = 2 << 20

#: the streamed input: one array, or an iterator of chunks of whole leading rows
#: (pairs (lat, lon) for haversine points)
StreamInput = Union[ArrayLike, Iterable[Any]]


def _row_elements(op: int, shape: Sequence[int]) -> int:
    """Elements a chunk must hold whole: a normalize row, a leading-axis row of points,
    any element count for discount product."""
    if op == pb.STREAMING_DISCOUNT_PRODUCT:
        return 1
    if op == pb.STREAMING_NORMALIZE:
        return int(shape[-1])
    return int(np.prod(shape[1:], dtype=np.int64))


def _chunks(parts: Iterable[Tuple[Array, ...]], row_bytes: int,
            step: int) -> Iterator[_wire.UploadData]:
    """Each tuple of equal-row arrays cut into messages of about ``step`` bytes of whole
    rows; views of the arrays, not copies."""
    for arrays in parts:
        views = [byte_view(np.ascontiguousarray(a)) for a in arrays]
        if views[0].nbytes % row_bytes:
            yield _wire.UploadData(*views)  # not whole rows: the server's refusal says so
            continue
        rows = views[0].nbytes // row_bytes
        per = max(1, step // (row_bytes * len(views)))
        for begin in range(0, rows, per):
            end = min(rows, begin + per)
            yield _wire.UploadData(*(v[begin * row_bytes:end * row_bytes] for v in views))


def _requests(header: Any, parts: Iterable[Tuple[Array, ...]], row_bytes: int,
              step: int) -> Iterator[Any]:
    """A StreamingCompute call's messages: the header, then the input's chunks."""
    yield pb.StreamingComputeRequest(header=header)
    yield from _chunks(parts, row_bytes, step)


def _merged_trailer(trailers: Sequence[Any]) -> Any:
    """One trailer for calls that ran at once: work summed, waits and spans the longest."""
    merged = pb.ResultTrailer()
    merged.CopyFrom(trailers[0])
    timing = merged.timing
    for trailer in trailers[1:]:
        timing.transfer_in_us += trailer.timing.transfer_in_us
        timing.compute_us += trailer.timing.compute_us
        timing.transfer_out_us += trailer.timing.transfer_out_us
        timing.prepare_us = max(timing.prepare_us, trailer.timing.prepare_us)
        timing.queue_us = max(timing.queue_us, trailer.timing.queue_us)
        timing.stream_write_us = max(timing.stream_write_us, trailer.timing.stream_write_us)
        timing.total_us = max(timing.total_us, trailer.timing.total_us)
        merged.streamed_chunks += trailer.streamed_chunks
    return merged


def _host_array(value: Any, name: str) -> Array:
    """A streamed operand: a NumPy array (numpy.memmap included) in its computing dtype
    (as ``cast_operands`` gives it: one of another dtype is copied whole, cast)."""
    array = as_array(value, name)
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{name}: a streamed operand must be a NumPy array (or chunks of one)")
    (_, host), = cast_operands([(name, array)])
    assert isinstance(host, np.ndarray)
    return host


def _input_parts(data: Any, count: int, name: str, shape: Optional[Sequence[int]],
                 dtype: Any) -> Tuple[Iterable[Tuple[Array, ...]], Tuple[int, ...],
                                      np.dtype[Any]]:
    """The streamed operand(s) as an iterable of tuples of chunks, the whole shape and the
    dtype: ``count`` whole arrays (their shape), or an iterator of chunks (``shape``
    required; ``dtype`` or the first chunk's)."""
    if isinstance(data, tuple) and len(data) == count and all(
            isinstance(a, np.ndarray) for a in data):
        arrays = tuple(_host_array(a, name) for a in data)
        if any(a.shape != arrays[0].shape or a.dtype != arrays[0].dtype for a in arrays):
            raise ValueError(f"{name}: the streamed arrays need one shape and dtype")
        return [arrays], tuple(arrays[0].shape), arrays[0].dtype
    if count == 1 and isinstance(data, np.ndarray):
        array = _host_array(data, name)
        return [(array,)], tuple(array.shape), array.dtype
    if shape is None:
        raise ValueError(f"{name} is an iterator of chunks: give shape= (the whole input's)")
    it = iter(data)
    first = next(it)
    first = first if isinstance(first, tuple) else (first,)
    if len(first) != count:
        raise ValueError(f"{name}: each chunk must be {count} array(s)")
    np_dtype = computing_dtype([np.asarray(first[0]).dtype], dtype)

    def parts() -> Iterator[Tuple[Array, ...]]:
        for chunk in [first] + [c if isinstance(c, tuple) else (c,) for c in it]:
            yield tuple(np.asarray(a, dtype=np_dtype) for a in chunk)

    return parts(), tuple(int(s) for s in shape), np_dtype


def _streaming_part(header: Any, arrays: Tuple[Array, ...], out: Array, row_bytes: int,
                    input_chunk_bytes: int, channel: int) -> Stream:
    """One call of a striped stream_* call: its rows of the input in, of the result out."""
    return Stream("Compute.StreamingCompute",
                  _requests(header, [arrays], row_bytes, input_chunk_bytes),
                  ResultStream(ResultOptions(out=out)), channel=channel)


class StreamingMethods:
    """The stream_* methods of ClientApi (both clients)."""

    if TYPE_CHECKING:
        stripes: int
        stripe_bytes: int

        def _call(self, name: str, timeout: Optional[float], steps: Steps[Any]) -> Any: ...

        def _empty(self, shape: Sequence[int], dtype: Any) -> Array: ...

    def stream_discount_product(self, factors: ArrayLike, values: StreamInput, *,
                                shape: Optional[Sequence[int]] = None, dtype: Any = None,
                                out: Optional[Array] = None, chunk_bytes: Optional[int] = None,
                                input_chunk_bytes: int = DEFAULT_STREAM_CHUNK,
                                return_timing: bool = False,
                                timeout: Optional[float] = None) -> Any:
        """factors * values, values streamed through the server in chunks: any size in
        one call with bounded server memory. factors broadcast into values' shape (the
        seed: (M, O) into (D, M, O)). values: an array (a numpy.memmap for inputs beyond
        this process's memory) or an iterator of chunks (any element counts, in C order)
        with shape= the whole; the result is (or is written into ``out``) byte for byte
        discount_product's."""
        parts, whole, np_dtype = _input_parts(values, 1, "values", shape, dtype)
        header = pb.StreamingComputeHeader(operation=pb.STREAMING_DISCOUNT_PRODUCT)
        (_, f), = cast_operands([("factors", as_array(factors, "factors"))], np_dtype)
        set_operand(header.factors, f)
        # Calls over row ranges of values see the same factors when these repeat along the
        # first axis: they do not span it (leading extents of 1 aside).
        f_shape = tuple(int(e) for e in f.shape)
        spanned = len(f_shape) - next((i for i, e in enumerate(f_shape) if e != 1), len(f_shape))
        return self._stream("stream_discount_product", header, parts, whole, np_dtype,
                            ResultOptions(chunk_bytes=chunk_bytes, return_timing=return_timing,
                                          timeout=timeout, out=out), input_chunk_bytes,
                            splits=spanned < len(whole))

    def stream_haversine_points(self, lat: Any, lon: Any, refs: ArrayLike, *,
                                radius: float = DEFAULT_RADIUS_KM,
                                shape: Optional[Sequence[int]] = None, dtype: Any = None,
                                out: Optional[Array] = None, chunk_bytes: Optional[int] = None,
                                input_chunk_bytes: int = DEFAULT_STREAM_CHUNK,
                                return_timing: bool = False,
                                timeout: Optional[float] = None) -> Any:
        """haversine_points streamed: lat and lon arrays (or lat an iterator of (lat, lon)
        chunk pairs, lon None, with shape=); result (n_ref, *S) as haversine_points'."""
        data = (_host_array(lat, "lat"), _host_array(lon, "lon")) if lon is not None else lat
        parts, whole, np_dtype = _input_parts(data, 2, "lat, lon", shape, dtype)
        request = haversine_request(refs, radius)
        header = pb.StreamingComputeHeader(operation=pb.STREAMING_HAVERSINE_POINTS,
                                           radius=request.radius)
        header.references.extend(request.references)
        return self._stream("stream_haversine_points", header, parts, whole, np_dtype,
                            ResultOptions(chunk_bytes=chunk_bytes, return_timing=return_timing,
                                          timeout=timeout, out=out), input_chunk_bytes)

    def stream_normalize(self, a: StreamInput, *, norm: str = "sum",
                         shape: Optional[Sequence[int]] = None, dtype: Any = None,
                         out: Optional[Array] = None, chunk_bytes: Optional[int] = None,
                         input_chunk_bytes: int = DEFAULT_STREAM_CHUNK,
                         return_timing: bool = False, timeout: Optional[float] = None) -> Any:
        """normalize streamed by rows (chunks of an iterator must hold whole rows)."""
        key = str(norm).lower()
        if key not in NORMS:
            raise ValueError(f"norm is {norm!r}; use 'sum', 'l1', 'l2' or 'max_abs'")
        parts, whole, np_dtype = _input_parts(a, 1, "a", shape, dtype)
        header = pb.StreamingComputeHeader(operation=pb.STREAMING_NORMALIZE, norm=NORMS[key])
        return self._stream("stream_normalize", header, parts, whole, np_dtype,
                            ResultOptions(chunk_bytes=chunk_bytes, return_timing=return_timing,
                                          timeout=timeout, out=out), input_chunk_bytes,
                            splits=len(whole) >= 2)  # rows are the last axis

    def _stream(self, name: str, header: Any, parts: Iterable[Tuple[Array, ...]],
                shape: Tuple[int, ...], dtype: np.dtype[Any], options: ResultOptions,
                input_chunk_bytes: int, splits: bool = False) -> Any:
        """splits: whether calls over ranges of the first axis give the whole's result."""
        if dtype not in NP_TO_PB:
            raise ValueError(f"dtype {dtype} is not float32 or float64")
        header.dtype = NP_TO_PB[dtype]
        header.shape.extend(shape)
        header.chunk_bytes = options.bulk_chunk_bytes()
        row_bytes = _row_elements(header.operation, shape) * dtype.itemsize
        runs = len(header.references) if header.operation == pb.STREAMING_HAVERSINE_POINTS else 1
        calls = 1
        # Whole arrays only: an iterator of chunks is read once, in order.
        if splits and isinstance(parts, list) and (options.out is None
                                                   or isinstance(options.out, np.ndarray)):
            nbytes = math.prod(shape) * dtype.itemsize
            calls = max(1, min(self.stripes, shape[0], nbytes // self.stripe_bytes))
        if calls > 1:
            whole_arrays = cast(List[Tuple[Array, ...]], parts)[0]
            steps = self._striped_streaming_steps(header, whole_arrays, calls, row_bytes,
                                                  options, input_chunk_bytes, dtype)
        else:
            steps = self._streaming_steps(
                _requests(header, parts, row_bytes, input_chunk_bytes), options, runs)
        return self._call(name, options.timeout, steps)

    def _striped_streaming_steps(self, header: Any, arrays: Tuple[Array, ...], calls: int,
                                 row_bytes: int, options: ResultOptions, input_chunk_bytes: int,
                                 dtype: np.dtype[Any]) -> Steps[Any]:
        """``calls`` StreamingCompute calls at once over equal ranges of the first axis, one
        per stripe connection, each writing its rows of the result in place."""
        start = time.perf_counter()
        shape = tuple(int(e) for e in header.shape)
        result = options.out if options.out is not None else self._empty(shape, dtype)
        if result.shape != shape or result.dtype != dtype:
            raise ValueError(f"out has shape {result.shape} and dtype {result.dtype}; the "
                             f"result has shape {shape} and dtype {dtype}")
        bounds = [shape[0] * k // calls for k in range(calls + 1)]
        steps = []
        for k, (begin, end) in enumerate(zip(bounds, bounds[1:])):
            part = pb.StreamingComputeHeader()
            part.CopyFrom(header)
            part.shape[0] = end - begin
            steps.append(stripe_step(_streaming_part, (
                part, tuple(a[begin:end] for a in arrays), Out(result[begin:end]), row_bytes,
                input_chunk_bytes, k), f"rows [{begin}, {end})"))
        # No retries: a call's requests are a generator, read once.
        yield Parallel(steps, retries=0)
        return options.deliver(result, _merged_trailer([s.sink.trailer for s in steps]), start)

    def _streaming_steps(self, requests: Iterator[Any], options: ResultOptions,
                         runs: int) -> Steps[Any]:
        start = time.perf_counter()
        sink = ResultStream(options, runs=runs)
        array = yield Stream("Compute.StreamingCompute", requests, sink)
        return options.deliver(array, sink.trailer, start)
