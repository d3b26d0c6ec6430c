"""Buffers.Upload and Buffers.Download of ClientApi (both clients), striped or not."""
from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Union, cast

import numpy as np

from . import _stripe_workers, _wire
from ._device_array import DeviceArray
from ._operands import ArrayLike, as_array, byte_view, cast_operands
from ._pb import pb
from ._steps import Parallel, Steps, Stream, Unary
from ._stream import ResultOptions, ResultStream
from ._stripe_workers import Out, stripe_step
from ._types import NP_TO_PB, Array


#: inline requests up to this size go out without asking the server for its limit
_UNASKED_INLINE_BYTES = 256 << 10
#: room for the request's other fields and framing
_MESSAGE_MARGIN = 64 << 10
#: default size of Upload data chunks (below any server's message limit)
DEFAULT_UPLOAD_CHUNK = 2 << 20
#: bytes of each ranged download of a striped download
DEFAULT_STRIPE_BYTES = 64 << 20


def _upload_messages(header: Any, view: memoryview, step: int) -> Iterator[Any]:
    yield header
    for off in range(0, view.nbytes, step):
        yield _wire.UploadData(view[off:off + step])


def _upload_part(header: Any, data: Array, step: int, channel: int) -> Unary:
    """One range of a striped upload (a list of views, no copies: a retry sends it again)."""
    return Unary("Buffers.Upload", list(_upload_messages(header, byte_view(data), step)),
                 channel=channel)


def _download_part(request: Any, array: Array, begin: int, end: int, channel: int) -> Stream:
    """Bytes [begin, end) of a striped download, written in place into ``array``."""
    return Stream("Buffers.Download", request,
                  ResultStream(ResultOptions(out=array), begin, end), channel=channel)


class TransferMethods:
    """upload and download of ClientApi."""

    if TYPE_CHECKING:
        stripes: int
        stripe_bytes: int
        _workers: Optional[_stripe_workers.StripeWorkers]

        def _call(self, name: str, timeout: Optional[float], steps: Steps[Any]) -> Any: ...

        def _max_message_bytes(self) -> Steps[int]: ...

        def _empty(self, shape: Sequence[int], dtype: Any) -> Array: ...

    def upload(self, array: ArrayLike, name: str = "", *, chunk_bytes: Optional[int] = None,
               timeout: Optional[float] = None) -> Any:
        """Store `array` on the server; returns its DeviceArray handle."""
        if isinstance(array, DeviceArray):
            raise TypeError("array is already a DeviceArray")
        (_, arr), = cast_operands([("array", as_array(array, "array"))])
        assert isinstance(arr, np.ndarray)
        if chunk_bytes is not None and int(chunk_bytes) <= 0:
            raise ValueError(f"chunk_bytes is {chunk_bytes}; it must be > 0")
        return self._call("upload", timeout, self._upload(arr, name, chunk_bytes))

    def _upload(self, arr: Array, name: str, chunk_bytes: Optional[int]) -> Steps[DeviceArray]:
        if chunk_bytes is None:
            step = DEFAULT_UPLOAD_CHUNK
            if arr.nbytes > _UNASKED_INLINE_BYTES:  # stay below the server's message limit
                limit = yield from self._max_message_bytes()
                step = max(4096, min(step, limit - _MESSAGE_MARGIN))
        else:
            step = int(chunk_bytes)
        header = pb.UploadRequest(header=pb.UploadHeader(
            name=name, dtype=NP_TO_PB[arr.dtype], shape=[int(s) for s in arr.shape]))
        view = byte_view(arr)
        if self.stripes > 1 and view.nbytes > self.stripe_bytes:
            info = yield from self._striped_upload(header, view, step)
        else:
            info = yield Unary("Buffers.Upload", _upload_messages(header, view, step))
        return DeviceArray._from_info(cast(Any, self), info)

    def _striped_upload(self, header: Any, view: memoryview, step: int) -> Steps[Any]:
        """Ranges of stripe_bytes into one upload session (UploadHeader.session_token):
        the first creates it, the others go at once; a range whose connection breaks is
        sent again whole. The stream that completes the session answers the stored
        buffer; if none could, an empty stream stores it."""
        header.header.session_token = os.urandom(16).hex()
        size, stripe = view.nbytes, self.stripe_bytes

        def part(begin: int, end: int, channel: int) -> Unary:
            ranged = pb.UploadRequest()
            ranged.CopyFrom(header)
            ranged.header.offset = begin
            data = np.frombuffer(view[begin:end], np.uint8)
            return stripe_step(_upload_part, (ranged, data, step, channel),
                               f"bytes [{begin}, {end})")

        infos = [(yield part(0, min(stripe, size), 0))]
        rest = [part(b, min(b + stripe, size), k % self.stripes)
                for k, b in enumerate(range(stripe, size, stripe))]
        if rest:
            infos += yield Parallel(rest)
        stored = next((info for info in infos if info.id), None)
        if stored is None:
            header.header.offset = size
            stored = yield Unary("Buffers.Upload", [header])
        return stored

    def download(self, buffer: Union[DeviceArray, str], *, out: Optional[Array] = None,
                 chunk_bytes: Optional[int] = None, return_timing: bool = False,
                 timeout: Optional[float] = None) -> Any:
        """A stored buffer's contents as a NumPy array (written into ``out`` when given)."""
        options = ResultOptions(chunk_bytes=chunk_bytes, return_timing=return_timing,
                                timeout=timeout, out=out)
        buffer_id = buffer.id if isinstance(buffer, DeviceArray) else str(buffer)
        request = pb.DownloadRequest(buffer_id=buffer_id, chunk_bytes=options.bulk_chunk_bytes())
        return self._call("download", timeout, self._download(request, options))

    def _download(self, request: Any, options: ResultOptions) -> Steps[Any]:
        start = time.perf_counter()
        if self.stripes == 1:
            sink = ResultStream(options)
            array = yield Stream("Buffers.Download", request, sink)
            return options.deliver(array, sink.trailer, start)
        # Striped: the first stripe's header gives the size and the array; the other
        # stripes then fill it in place, at once. Stripe processes write shared memory:
        # an ``out`` elsewhere gets the result copied in at the end.
        step = self.stripe_bytes
        request.length = step
        out = options.out
        if self._workers is not None and out is not None and not _stripe_workers.find_block(out):
            options = replace(options, out=None)
        sink = ResultStream(options, 0, step, allocate=self._empty)
        array = yield Stream("Buffers.Download", request, sink)
        stripes = []
        for k, begin in enumerate(range(step, sink.total, step)):
            ranged = pb.DownloadRequest()
            ranged.CopyFrom(request)
            ranged.offset, ranged.length = begin, step
            stripes.append(stripe_step(_download_part,
                                       (ranged, Out(array), begin, begin + step, k % self.stripes),
                                       f"bytes [{begin}, {min(begin + step, sink.total)})"))
        if stripes:
            yield Parallel(stripes)
        if out is not None and options.out is None:
            _stripe_workers.copy_on_threads(out, array, self.stripes)
            array = out
        return options.deliver(array, sink.trailer, start)
