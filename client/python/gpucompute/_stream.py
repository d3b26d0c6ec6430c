"""What a caller asks of a result (ResultOptions) and the assembly of its stream."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple, Union

import grpc
import numpy as np

from . import _wire
from ._device_array import DeviceArray
from ._operands import byte_view
from ._cuda_arrays import CudaArray, is_cuda_array
from ._types import Array, PB_TO_NP, Timing
from .errors import ProtocolError, Unimplemented

#: data chunk size of downloads and streamed results when the caller gives none: grpcio
#: assembles each received message in fresh memory with two to three copies, all under
#: the GIL; at 256 KiB they stay in the CPU's L2 cache and in reused heap memory (from 1
#: MiB up every message page-faults in fresh mmapped blocks, which costs the client more
#: CPU than the copies)
BULK_RESULT_CHUNK = 256 << 10

#: what a compute method (or download) returns: the array (``out`` itself when given),
#: the DeviceArray of a keep_on_device result, or either with its Timing
Result = Union[Array, DeviceArray, Tuple[Union[Array, DeviceArray], Timing]]


@dataclass(frozen=True)
class ResultOptions:
    """The keywords every compute method takes, in one place.

    keep_on_device: store the result on the server and return its DeviceArray;
    out: a C-contiguous, writeable NumPy array of the result's shape and dtype to write the
    result into (and return); when it lies in Client.shared_array memory, or is a device
    array (CuPy, PyTorch, ...), the server writes it there itself and nothing is streamed;
    chunk_bytes: size of the result stream's data chunks (None: the server's default);
    return_timing: return (result, Timing); buffer_name: the stored result's name
    (keep_on_device only); timeout: this call's deadline in seconds (None: the client's).
    """

    keep_on_device: bool = False
    chunk_bytes: Optional[int] = None
    return_timing: bool = False
    buffer_name: Optional[str] = None
    timeout: Optional[float] = None
    out: Optional[Array] = None
    #: the result is complex as (..., 2) pairs (real, imaginary): delivered as a complex
    #: view of them, and a complex ``out`` is written through its pairs
    complex_pairs: bool = False

    def __post_init__(self) -> None:
        if self.complex_pairs and self.out is not None and np.dtype(self.out.dtype).kind == "c":
            pairs = self.out.view(self.out.real.dtype).reshape(tuple(self.out.shape) + (2,))
            object.__setattr__(self, "out", pairs)  # frozen: set once, here
        if self.buffer_name and not self.keep_on_device:
            raise ValueError("buffer_name is only meaningful with keep_on_device=True")
        if self.out is None:
            return
        if self.keep_on_device:
            raise ValueError("out and keep_on_device=True exclude each other")
        if is_cuda_array(self.out):
            CudaArray(self.out, "out")  # checks dtype and layout
            return
        if not isinstance(self.out, np.ndarray):
            raise TypeError(f"out is a {type(self.out).__name__}; give a NumPy array (or a "
                            "device array with __cuda_array_interface__)")
        if not (self.out.flags.c_contiguous and self.out.flags.writeable):
            raise ValueError("out must be a C-contiguous, writeable NumPy array")

    def bulk_chunk_bytes(self) -> int:
        """chunk_bytes for a download or a streamed result: the caller's, else
        BULK_RESULT_CHUNK."""
        return int(self.chunk_bytes) if self.chunk_bytes else BULK_RESULT_CHUNK

    def fill(self, output: Any) -> None:
        """Sets a request's pb.OutputOptions."""
        output.accept_complete_result = True  # ResultStream.feed reads `complete`
        if self.chunk_bytes:
            output.chunk_bytes = int(self.chunk_bytes)
        if self.keep_on_device:
            output.keep_on_device = True
            if self.buffer_name:
                output.buffer_name = self.buffer_name

    def deliver(self, value: Union[Array, DeviceArray], trailer: Any, start: float,
                upload: float = 0.0) -> Result:
        """value, or (value, Timing) when return_timing; start: the call's perf_counter."""
        if self.complex_pairs and not isinstance(value, DeviceArray):
            value = _complex_view(value)
        if not self.return_timing:
            return value
        return value, Timing._from_trailer(trailer, upload=upload,
                                           wall=time.perf_counter() - start)


def _complex_view(pairs: Any) -> Any:
    """(..., 2) real pairs as the complex (...) array sharing their memory."""
    if pairs.ndim == 0 or pairs.shape[-1] != 2:
        raise Unimplemented(grpc.StatusCode.UNIMPLEMENTED,
                            f"a complex result came as shape {tuple(pairs.shape)}, not (..., 2): "
                            "the server predates normalize='amplitude'")
    complex_dtype = np.result_type(pairs.dtype, np.complex64)
    return pairs.view(complex_dtype).reshape(pairs.shape[:-1])


class ResultStream:
    """Assembles one header/data/trailer result stream; with a range (a striped
    download's stripe), only bytes [begin, end) of the result come, into ``options.out``.
    With ``runs`` > 1 the result is that many equal runs whose chunks come in order within
    each run, interleaved (StreamingCompute's haversine points: a run per reference)."""

    def __init__(self, options: ResultOptions, begin: int = 0, end: Optional[int] = None,
                 runs: int = 1, allocate: Callable[[Tuple[int, ...], Any], Array] = np.empty):
        self.keep = options.keep_on_device
        #: makes the result's array where no ``out`` is given
        self.allocate = allocate
        self.out = options.out
        self.runs = max(1, runs)
        #: the server writes the result into ``out`` (shared memory): no data chunks
        self.shared_out = False
        self.begin, self.end = begin, end
        self.reset()

    def reset(self) -> None:
        """Back to before the header (a stripe fetched again)."""
        self.array: Optional[Array] = None
        #: the result's bytes, which data chunks are copied into
        self.bytes: Optional[Array] = None
        self.total = 0
        self.received = self.begin
        self.header: Any = None
        self.trailer: Any = None
        #: with runs > 1: the offset each run's next chunk must have
        self.run_next: List[int] = []

    def _fail(self, message: str) -> ProtocolError:
        return ProtocolError(grpc.StatusCode.DATA_LOSS, "result stream: " + message)

    def on_header(self, header: Any) -> None:
        if self.header is not None:
            raise self._fail("a second header")
        self.header = header
        if header.dtype not in PB_TO_NP:
            raise self._fail(f"header has unknown dtype {header.dtype}")
        dtype: np.dtype[Any] = PB_TO_NP[header.dtype]
        shape = tuple(header.shape)  # ints already; per call, so no np.prod (~5 us)
        if shape and min(shape) < 0:
            raise self._fail(f"header has negative extent in shape {shape}")
        expected = math.prod(shape) * dtype.itemsize
        if header.total_bytes != expected:
            raise self._fail(f"header says {header.total_bytes} bytes but shape {shape} of "
                             f"{dtype.name} is {expected}")
        self.total = expected
        self.end = expected if self.end is None else min(self.end, expected)
        if self.runs > 1:
            if expected % self.runs or self.begin:
                raise self._fail(f"{expected} bytes do not split into {self.runs} runs")
            self.run_next = list(range(0, expected, expected // self.runs))
        if self.begin > expected:
            raise self._fail(f"range starts at {self.begin}, past the result's {expected} bytes")
        if self.keep:
            return
        if self.out is not None and (self.out.shape != shape or self.out.dtype != dtype):
            raise ValueError(f"out has shape {self.out.shape} and dtype {self.out.dtype}; "
                             f"the result has shape {shape} and dtype {dtype}")
        self.array = self.allocate(shape, dtype) if self.out is None else self.out
        if not self.shared_out:
            self.bytes = np.frombuffer(byte_view(self.array), np.uint8)

    def on_data(self, offset: int, data: Union[bytes, memoryview]) -> None:
        if self.header is None:
            raise self._fail("data before the header")
        if self.trailer is not None:
            raise self._fail("data after the trailer")
        if self.keep or self.shared_out:
            raise self._fail("data chunk for a result kept on the server or in shared memory")
        n = len(data) if isinstance(data, bytes) else data.nbytes
        assert self.end is not None  # set by the header
        end = self.end
        if self.run_next:
            run_bytes = self.total // self.runs
            run = min(offset // run_bytes, self.runs - 1)
            if offset != self.run_next[run]:
                raise self._fail(f"chunk at offset {offset}, expected {self.run_next[run]} "
                                 f"(run {run})")
            end = (run + 1) * run_bytes
            self.run_next[run] += n
        elif offset != self.received:
            raise self._fail(f"chunk at offset {offset}, expected {self.received}")
        if offset + n > end:
            raise self._fail(f"chunk [{offset}, {offset + n}) runs past the result's "
                             f"{end} bytes")
        assert self.bytes is not None  # set by the header
        # NumPy copies without the GIL (a memoryview assignment holds it): the stripes'
        # copies and the result's first-touch page faults run in parallel.
        np.copyto(self.bytes[offset:offset + n], np.frombuffer(data, np.uint8))
        self.received += n

    def on_trailer(self, trailer: Any) -> None:
        if self.trailer is not None:
            raise self._fail("a second trailer")
        self.trailer = trailer

    def feed(self, message: Any) -> None:
        if isinstance(message, _wire.DataChunk):
            self.on_data(message.offset, message.data)
            return
        kind = message.WhichOneof("kind")
        if kind == "header":
            self.on_header(message.header)
        elif kind == "data":
            self.on_data(message.data.offset, message.data.data)
        elif kind == "trailer":
            self.on_trailer(message.trailer)
        elif kind == "complete":
            self.feed_complete(message.complete)
        else:
            raise self._fail("a ResultChunk with no kind set")

    def feed_complete(self, complete: Any) -> None:
        """A whole result in one pb.ResultComplete."""
        self.on_header(complete.header)
        # No data for a kept result or one written into shared memory.
        if not (self.keep or self.shared_out) or complete.data:
            self.on_data(0, complete.data)
        self.on_trailer(complete.trailer)

    def finish(self) -> Optional[Array]:
        if self.trailer is None:
            raise self._fail("ended without a trailer")
        if self.keep:
            if not self.trailer.HasField("stored_buffer"):
                raise self._fail("keep_on_device result without stored_buffer")
            return None
        if self.header is None:
            raise self._fail("ended without a header")
        if self.shared_out:
            if not self.trailer.shared_memory_region_id:
                raise self._fail("result for shared memory without shared_memory_region_id")
            return self.array
        if self.received != self.end:
            raise self._fail(f"received {self.received} of {self.end} bytes")
        return self.array
