"""The gpucompute Python client: NumPy arrays in, NumPy arrays (or DeviceArrays) out."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import _wire
from ._pb import pb
from .errors import GpuComputeError, ProtocolError, from_rpc_error

__all__ = [
    "Client", "DeviceArray", "FrequencyGrid", "Timing", "ServerInfo", "DeviceInfo", "Limits",
    "BufferList", "DEFAULT_RADIUS_KM", "DEFAULT_UPLOAD_THRESHOLD",
]

DEFAULT_RADIUS_KM = 6371.0088
#: inline operands larger than this go through Buffers.Upload automatically
DEFAULT_UPLOAD_THRESHOLD = 8 << 20
#: a message size every gRPC server accepts (its default limit), assumed when the
#: server's own limit cannot be read
_SAFE_MESSAGE_BYTES = 4 << 20
#: inline requests up to this size go out without asking the server for its limit
_UNASKED_INLINE_BYTES = 256 << 10
#: room for the request's other fields and framing
_MESSAGE_MARGIN = 64 << 10
#: default size of Upload data chunks (below any server's message limit)
DEFAULT_UPLOAD_CHUNK = 2 << 20

_SERVICE = "/gpucompute.v1."

_NP_TO_PB = {np.dtype("<f4"): pb.FLOAT32, np.dtype("<f8"): pb.FLOAT64}
_PB_TO_NP = {pb.FLOAT32: np.dtype("<f4"), pb.FLOAT64: np.dtype("<f8")}

_NORMS = {
    "sum": pb.NORM_SUM,
    "l1": pb.NORM_L1,
    "l2": pb.NORM_L2,
    "max_abs": pb.NORM_MAX_ABS,
    "max": pb.NORM_MAX_ABS,
    "inf": pb.NORM_MAX_ABS,
}

ArrayLike = Any


# ---------------------------------------------------------------------------------
# Value types


@dataclass(frozen=True)
class Timing:
    """Server-side timing of one request, in seconds, plus where it ran.

    queue: accepted -> started; transfer_in: inline operands copied to the device;
    compute: the operation (device time on a GPU); transfer_out: the result copied back,
    all chunks; total: accepted -> trailer sent. Client-side: upload is the time spent
    uploading large operands before the call (0 when none), wall the whole call as the
    client saw it (upload, request, stream, assembly).
    """

    queue: float
    transfer_in: float
    compute: float
    transfer_out: float
    total: float
    backend: str
    device: str
    upload: float = 0.0
    wall: float = 0.0

    @classmethod
    def _from_trailer(cls, trailer, *, upload: float = 0.0, wall: float = 0.0) -> "Timing":
        t = trailer.timing
        return cls(queue=t.queue_us / 1e6, transfer_in=t.transfer_in_us / 1e6,
                   compute=t.compute_us / 1e6, transfer_out=t.transfer_out_us / 1e6,
                   total=t.total_us / 1e6, backend=trailer.backend, device=trailer.device,
                   upload=upload, wall=wall)

    def __str__(self) -> str:
        ms = lambda s: f"{s * 1e3:.3f} ms"  # noqa: E731
        parts = [f"queue {ms(self.queue)}", f"in {ms(self.transfer_in)}",
                 f"compute {ms(self.compute)}", f"out {ms(self.transfer_out)}",
                 f"total {ms(self.total)}"]
        if self.upload:
            parts.append(f"upload {ms(self.upload)}")
        if self.wall:
            parts.append(f"wall {ms(self.wall)}")
        return f"[{self.backend} {self.device}] " + ", ".join(parts)


@dataclass(frozen=True)
class FrequencyGrid:
    """np.linspace(start, stop, count) angular frequencies, generated on the server."""

    start: float
    stop: float
    count: int

    def numpy(self, dtype=np.float64) -> np.ndarray:
        """The same frequencies on the client (e.g. for a SciPy reference)."""
        return np.linspace(self.start, self.stop, int(self.count), dtype=np.float64).astype(dtype)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    description: str
    memory_bytes: int
    healthy: bool


@dataclass(frozen=True)
class Limits:
    max_receive_message_bytes: int
    buffer_quota_bytes: int
    min_chunk_bytes: int
    max_chunk_bytes: int
    default_chunk_bytes: int
    max_rank: int
    max_elements: int
    executor_threads: int
    max_queue_depth: int
    max_device_queue_depth: int


@dataclass(frozen=True)
class ServerInfo:
    version: str
    backend: str
    backend_note: str
    devices: Tuple[DeviceInfo, ...]
    operations: Dict[str, Tuple[np.dtype, ...]]
    limits: Limits
    raw: Any = field(repr=False, compare=False, default=None)


class BufferList(list):
    """list of DeviceArray, with the store's used_bytes and quota_bytes."""

    used_bytes: int = 0
    quota_bytes: int = 0


class DeviceArray:
    """A buffer stored on the server (on the device that computes with it).

    Pass it to any Client method as an operand; ``download()`` fetches it, ``delete()``
    frees it; as a context manager it is deleted on exit.
    """

    __slots__ = ("_client", "id", "name", "shape", "dtype", "nbytes", "location",
                 "created_unix_ms", "_deleted")

    def __init__(self, client: "Client", id: str, shape: Tuple[int, ...], dtype: np.dtype,
                 nbytes: int, location: str, name: str = "", created_unix_ms: int = 0):
        self._client = client
        self.id = id
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(nbytes)
        self.location = location
        self.created_unix_ms = int(created_unix_ms)
        self._deleted = False

    @classmethod
    def _from_info(cls, client: "Client", info) -> "DeviceArray":
        if info.dtype not in _PB_TO_NP:
            raise ProtocolError(grpc.StatusCode.DATA_LOSS,
                                f"buffer {info.id} has unknown dtype {info.dtype}")
        return cls(client, info.id, tuple(info.shape), _PB_TO_NP[info.dtype], info.bytes,
                   info.location, info.name, info.created_unix_ms)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def deleted(self) -> bool:
        return self._deleted

    def download(self, *, chunk_bytes: Optional[int] = None, return_timing: bool = False,
                 timeout: Optional[float] = None):
        """The buffer's contents as a new NumPy array."""
        return self._client.download(self, chunk_bytes=chunk_bytes, return_timing=return_timing,
                                     timeout=timeout)

    def numpy(self) -> np.ndarray:
        return self.download()

    def delete(self, *, timeout: Optional[float] = None) -> int:
        """Free the buffer; returns the bytes freed (0 if this handle deleted it before)."""
        if self._deleted:
            return 0
        freed = self._client.delete(self.id, timeout=timeout)
        self._deleted = True
        return freed

    def __enter__(self) -> "DeviceArray":
        return self

    def __exit__(self, *exc) -> None:
        from .errors import NotFound
        try:
            self.delete()
        except NotFound:
            self._deleted = True

    def __repr__(self) -> str:
        name = f", name={self.name!r}" if self.name else ""
        state = ", deleted" if self._deleted else ""
        return (f"DeviceArray(id={self.id!r}{name}, shape={self.shape}, dtype={self.dtype.name}, "
                f"nbytes={self.nbytes}, location={self.location!r}{state})")


# ---------------------------------------------------------------------------------
# Helpers


def _as_array(value: ArrayLike, field_name: str) -> Union[np.ndarray, DeviceArray]:
    """A C-contiguous little-endian float32/float64 array (or the DeviceArray itself)."""
    if isinstance(value, DeviceArray):
        if value.deleted:
            raise ValueError(f"{field_name}: {value!r} was deleted")
        return value
    arr = np.asarray(value)
    if arr.dtype.kind != "f" or arr.dtype.itemsize not in (4, 8):
        raise TypeError(f"{field_name}: dtype {arr.dtype} is not supported; "
                        "gpucompute computes in float32 or float64 (cast with .astype)")
    want = np.dtype("<f4") if arr.dtype.itemsize == 4 else np.dtype("<f8")
    if arr.dtype != want:
        arr = arr.astype(want)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    return arr


def _same_dtype(named: Sequence[Tuple[str, Union[np.ndarray, DeviceArray]]]) -> np.dtype:
    first_name, first = named[0]
    for name, value in named[1:]:
        if value.dtype != first.dtype:
            raise TypeError(f"{first_name} is {first.dtype.name} but {name} is "
                            f"{value.dtype.name}; operands must share one dtype "
                            "(no implicit casts: cast with .astype)")
    return first.dtype


def _byte_view(arr: np.ndarray) -> memoryview:
    return memoryview(arr.reshape(-1)).cast("B")


def _set_operand(operand, value: Union[np.ndarray, DeviceArray]) -> None:
    if isinstance(value, DeviceArray):
        operand.buffer_id = value.id
        return
    tensor = operand.tensor
    tensor.dtype = _NP_TO_PB[value.dtype]
    tensor.shape.extend(int(s) for s in value.shape)
    tensor.data = value.tobytes()


def _result_dtype(dtype) -> int:
    dt = np.dtype(dtype)
    if dt.kind != "f" or dt.itemsize not in (4, 8):
        raise TypeError(f"dtype {dt} is not supported; use float32 or float64")
    return pb.FLOAT32 if dt.itemsize == 4 else pb.FLOAT64


def _references(refs) -> np.ndarray:
    r = np.asarray(refs, dtype=np.float64)
    if r.shape == (2,):
        r = r[None, :]
    if r.ndim != 2 or r.shape[1] != 2 or r.shape[0] == 0:
        raise ValueError(f"refs has shape {np.shape(refs)}; give a (lat, lon) pair or a "
                         "sequence of (lat, lon) pairs, in degrees")
    return r


class _Stream:
    """Assembles one header/data/trailer result stream."""

    def __init__(self, keep_on_device: bool):
        self.keep = keep_on_device
        self.array: Optional[np.ndarray] = None
        self.view: Optional[memoryview] = None
        self.total = 0
        self.received = 0
        self.header = None
        self.trailer = None

    def _fail(self, message: str) -> ProtocolError:
        return ProtocolError(grpc.StatusCode.DATA_LOSS, "result stream: " + message)

    def on_header(self, header) -> None:
        if self.header is not None:
            raise self._fail("a second header")
        self.header = header
        if header.dtype not in _PB_TO_NP:
            raise self._fail(f"header has unknown dtype {header.dtype}")
        dtype = _PB_TO_NP[header.dtype]
        shape = tuple(int(s) for s in header.shape)
        if any(s < 0 for s in shape):
            raise self._fail(f"header has negative extent in shape {shape}")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if header.total_bytes != expected:
            raise self._fail(f"header says {header.total_bytes} bytes but shape {shape} of "
                             f"{dtype.name} is {expected}")
        self.total = expected
        if not self.keep:
            self.array = np.empty(shape, dtype)
            self.view = _byte_view(self.array)

    def on_data(self, offset: int, data) -> None:
        if self.header is None:
            raise self._fail("data before the header")
        if self.trailer is not None:
            raise self._fail("data after the trailer")
        if self.keep:
            raise self._fail("data chunk for a keep_on_device result")
        n = len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes
        if offset != self.received:
            raise self._fail(f"chunk at offset {offset}, expected {self.received}")
        if offset + n > self.total:
            raise self._fail(f"chunk [{offset}, {offset + n}) runs past the result's "
                             f"{self.total} bytes")
        self.view[offset:offset + n] = data
        self.received += n

    def on_trailer(self, trailer) -> None:
        if self.trailer is not None:
            raise self._fail("a second trailer")
        self.trailer = trailer

    def feed(self, message) -> None:
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
        else:
            raise self._fail("a ResultChunk with no kind set")

    def finish(self):
        if self.trailer is None:
            raise self._fail("ended without a trailer")
        if self.keep:
            if not self.trailer.HasField("stored_buffer"):
                raise self._fail("keep_on_device result without stored_buffer")
            return None
        if self.header is None:
            raise self._fail("ended without a header")
        if self.received != self.total:
            raise self._fail(f"received {self.received} of {self.total} bytes")
        return self.array


# ---------------------------------------------------------------------------------
# Client


class Client:
    """A connection to a gpucompute server.

    Parameters
    ----------
    target: "host:port".
    credentials: grpc.ChannelCredentials for TLS (e.g. grpc.ssl_channel_credentials());
        None for a plaintext channel.
    token: sent with every call as "authorization: Bearer <token>" metadata.
    timeout: default deadline of every call, in seconds (None: none).
    upload_threshold: inline operands larger than this many bytes are uploaded as
        temporary buffers first (and deleted after the call); also whenever the inline
        operands together would pass the server's message limit.
    options: extra grpc channel options.

    The client is thread-safe: one Client may serve concurrent calls from threads.
    """

    def __init__(self, target: str, *, credentials: Optional[grpc.ChannelCredentials] = None,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 upload_threshold: int = DEFAULT_UPLOAD_THRESHOLD,
                 options: Sequence[Tuple[str, Any]] = ()):
        self.target = target
        self.timeout = timeout
        self.upload_threshold = int(upload_threshold)
        opts = [("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", -1)] + list(options)
        if credentials is not None:
            self._channel = grpc.secure_channel(target, credentials, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._max_message: Optional[int] = None
        self._lock = threading.Lock()

        ch = self._channel
        result = _wire.decode_result_chunk
        self._compute = {
            name: ch.unary_stream(_SERVICE + "Compute/" + name,
                                  request_serializer=_serialize, response_deserializer=result)
            for name in ("DiscountProduct", "HaversineGrid", "Normalize", "LombScargle")
        }
        self._upload = ch.stream_unary(_SERVICE + "Buffers/Upload",
                                       request_serializer=_wire.encode_upload_request,
                                       response_deserializer=pb.BufferInfo.FromString)
        self._download = ch.unary_stream(_SERVICE + "Buffers/Download",
                                         request_serializer=_serialize,
                                         response_deserializer=result)
        self._delete = ch.unary_unary(_SERVICE + "Buffers/Delete", request_serializer=_serialize,
                                      response_deserializer=pb.DeleteResponse.FromString)
        self._list = ch.unary_unary(_SERVICE + "Buffers/List", request_serializer=_serialize,
                                    response_deserializer=pb.ListResponse.FromString)
        self._get_info = ch.unary_unary(_SERVICE + "Server/GetInfo",
                                        request_serializer=_serialize,
                                        response_deserializer=pb.ServerInfo.FromString)
        self._health = ch.unary_unary("/grpc.health.v1.Health/Check",
                                      request_serializer=_wire.encode_health_request,
                                      response_deserializer=_wire.decode_health_response)

    # -- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.target!r})"

    def _deadline(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout

    def _unary(self, stub, request, method: str, timeout: Optional[float]):
        try:
            return stub(request, timeout=self._deadline(timeout), metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from None

    # -- server --------------------------------------------------------------------

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> str:
        """grpc.health.v1 status: "SERVING", "NOT_SERVING", ... ("" = the whole server)."""
        return self._unary(self._health, service, "Health.Check", timeout)

    def info(self, *, timeout: Optional[float] = None) -> ServerInfo:
        raw = self._unary(self._get_info, pb.GetInfoRequest(), "Server.GetInfo", timeout)
        lim = raw.limits
        limits = Limits(
            max_receive_message_bytes=lim.max_receive_message_bytes,
            buffer_quota_bytes=lim.buffer_quota_bytes, min_chunk_bytes=lim.min_chunk_bytes,
            max_chunk_bytes=lim.max_chunk_bytes, default_chunk_bytes=lim.default_chunk_bytes,
            max_rank=lim.max_rank, max_elements=lim.max_elements,
            executor_threads=lim.executor_threads, max_queue_depth=lim.max_queue_depth,
            max_device_queue_depth=lim.max_device_queue_depth)
        with self._lock:
            if lim.max_receive_message_bytes:
                self._max_message = int(lim.max_receive_message_bytes)
        return ServerInfo(
            version=raw.version, backend=raw.backend, backend_note=raw.backend_note,
            devices=tuple(DeviceInfo(d.name, d.description, d.memory_bytes, d.healthy)
                          for d in raw.devices),
            operations={op.name: tuple(_PB_TO_NP[d] for d in op.dtypes if d in _PB_TO_NP)
                        for op in raw.operations},
            limits=limits, raw=raw)

    def _max_message_bytes(self) -> int:
        with self._lock:
            known = self._max_message
        if known is not None:
            return known
        try:
            self.info()
        except GpuComputeError:
            return _SAFE_MESSAGE_BYTES  # not cached: the next call asks again
        with self._lock:
            return self._max_message or _SAFE_MESSAGE_BYTES

    # -- buffers -------------------------------------------------------------------

    def upload(self, array: ArrayLike, name: str = "", *, chunk_bytes: Optional[int] = None,
               timeout: Optional[float] = None) -> DeviceArray:
        """Store `array` on the server; returns its DeviceArray handle."""
        if isinstance(array, DeviceArray):
            raise TypeError("array is already a DeviceArray")
        arr = _as_array(array, "array")
        if chunk_bytes is None:
            step = DEFAULT_UPLOAD_CHUNK
            if arr.nbytes > _UNASKED_INLINE_BYTES:  # stay below the server's message limit
                step = max(4096, min(step, self._max_message_bytes() - _MESSAGE_MARGIN))
        else:
            step = int(chunk_bytes)
            if step <= 0:
                raise ValueError(f"chunk_bytes is {chunk_bytes}; it must be > 0")
        header = pb.UploadRequest(header=pb.UploadHeader(
            name=name, dtype=_NP_TO_PB[arr.dtype], shape=[int(s) for s in arr.shape]))
        view = _byte_view(arr)

        def requests():
            yield header
            for off in range(0, view.nbytes, step):
                yield _wire.UploadData(view[off:off + step])

        info = self._unary(self._upload, requests(), "Buffers.Upload", timeout)
        return DeviceArray._from_info(self, info)

    def download(self, buffer: Union[DeviceArray, str], *, chunk_bytes: Optional[int] = None,
                 return_timing: bool = False, timeout: Optional[float] = None):
        """A stored buffer's contents as a NumPy array."""
        buffer_id = buffer.id if isinstance(buffer, DeviceArray) else str(buffer)
        request = pb.DownloadRequest(buffer_id=buffer_id, chunk_bytes=int(chunk_bytes or 0))
        start = time.perf_counter()
        array, trailer = self._collect(self._download, request, "Buffers.Download", False,
                                       timeout)
        if return_timing:
            return array, Timing._from_trailer(trailer, wall=time.perf_counter() - start)
        return array

    def delete(self, buffer: Union[DeviceArray, str], *, timeout: Optional[float] = None) -> int:
        """Free a stored buffer; returns the bytes freed."""
        if isinstance(buffer, DeviceArray):
            return buffer.delete(timeout=timeout)
        reply = self._unary(self._delete, pb.DeleteRequest(buffer_id=str(buffer)),
                            "Buffers.Delete", timeout)
        return int(reply.freed_bytes)

    def list_buffers(self, *, timeout: Optional[float] = None) -> BufferList:
        """The stored buffers (of every client of this server)."""
        reply = self._unary(self._list, pb.ListRequest(), "Buffers.List", timeout)
        out = BufferList(DeviceArray._from_info(self, b) for b in reply.buffers)
        out.used_bytes = int(reply.used_bytes)
        out.quota_bytes = int(reply.quota_bytes)
        return out

    # -- compute plumbing ------------------------------------------------------------

    def _collect(self, stub, request, method: str, keep: bool, timeout: Optional[float]):
        stream = _Stream(keep)
        call = stub(request, timeout=self._deadline(timeout), metadata=self._metadata)
        try:
            for message in call:
                stream.feed(message)
            array = stream.finish()
        except grpc.RpcError as e:
            raise from_rpc_error(e, method) from None
        except BaseException:
            call.cancel()
            raise
        return array, stream.trailer

    def _place(self, named, timeout):
        """Uploads the inline operands that are too large to send inline.

        Returns ({field: ndarray or DeviceArray}, [temporary DeviceArrays], seconds).
        """
        placed = dict(named)
        inline = [(n, v) for n, v in named if isinstance(v, np.ndarray)]
        total = sum(v.nbytes for _, v in inline)
        big = [n for n, v in inline if v.nbytes > self.upload_threshold]
        with self._lock:
            known = self._max_message
        if not big and total <= (_UNASKED_INLINE_BYTES if known is None
                                 else known - _MESSAGE_MARGIN):
            return placed, [], 0.0
        limit = max(self._max_message_bytes() - _MESSAGE_MARGIN, 0)
        chosen = set(big)
        remaining = sorted(((v.nbytes, n) for n, v in inline if n not in chosen), reverse=True)
        total -= sum(placed[n].nbytes for n in chosen)
        for nbytes, n in remaining:
            if total <= limit:
                break
            chosen.add(n)
            total -= nbytes
        temps: List[DeviceArray] = []
        start = time.perf_counter()
        try:
            for n, v in inline:
                if n in chosen:
                    handle = self.upload(v, name=f"gpucompute-py tmp {n}", timeout=timeout)
                    temps.append(handle)
                    placed[n] = handle
        except BaseException:
            self._drop(temps)
            raise
        return placed, temps, time.perf_counter() - start

    def _drop(self, temps: List[DeviceArray]) -> None:
        for handle in temps:
            try:
                handle.delete()
            except GpuComputeError:
                pass

    def _run(self, method: str, make_request, named, *, keep_on_device: bool,
             chunk_bytes: Optional[int], return_timing: bool, buffer_name: Optional[str],
             timeout: Optional[float]):
        start = time.perf_counter()
        placed, temps, upload_s = self._place(named, timeout)
        try:
            request = make_request(placed)
            out = request.output
            if chunk_bytes:
                out.chunk_bytes = int(chunk_bytes)
            if keep_on_device:
                out.keep_on_device = True
                if buffer_name:
                    out.buffer_name = buffer_name
            elif buffer_name:
                raise ValueError("buffer_name is only meaningful with keep_on_device=True")
            array, trailer = self._collect(self._compute[method], request, "Compute." + method,
                                           keep_on_device, timeout)
        finally:
            self._drop(temps)
        value = DeviceArray._from_info(self, trailer.stored_buffer) if keep_on_device else array
        if return_timing:
            timing = Timing._from_trailer(trailer, upload=upload_s,
                                          wall=time.perf_counter() - start)
            return value, timing
        return value

    # -- compute ---------------------------------------------------------------------

    def discount_product(self, factors: ArrayLike, values: ArrayLike, *,
                         keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                         return_timing: bool = False, buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None):
        """factors * values with NumPy broadcasting (the seed: (M, O) * (D, M, O))."""
        named = [("factors", _as_array(factors, "factors")),
                 ("values", _as_array(values, "values"))]
        _same_dtype(named)

        def make(p):
            req = pb.DiscountProductRequest()
            _set_operand(req.factors, p["factors"])
            _set_operand(req.values, p["values"])
            return req

        return self._run("DiscountProduct", make, named, keep_on_device=keep_on_device,
                         chunk_bytes=chunk_bytes, return_timing=return_timing,
                         buffer_name=buffer_name, timeout=timeout)

    def haversine_grid(self, lat_start: float, lat_stop: float, n_lat: int, lon_start: float,
                       lon_stop: float, n_lon: int, refs, radius: float = DEFAULT_RADIUS_KM,
                       dtype=np.float64, *, keep_on_device: bool = False,
                       chunk_bytes: Optional[int] = None, return_timing: bool = False,
                       buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Great-circle distances from each reference (lat, lon) to every point of the mesh
        linspace(lat_start, lat_stop, n_lat) x linspace(lon_start, lon_stop, n_lon),
        generated on the server; degrees in, `radius` units out; shape (n_ref, n_lat, n_lon).
        """
        refs_arr = _references(refs)
        pb_dtype = _result_dtype(dtype)
        _check_radius(radius)
        for name, n in (("n_lat", n_lat), ("n_lon", n_lon)):
            if int(n) != n or n < 1:
                raise ValueError(f"{name} is {n}; it must be a positive integer")

        def make(_):
            req = pb.HaversineGridRequest(radius=float(radius))
            m = req.mesh
            m.lat_start, m.lat_stop, m.n_lat = float(lat_start), float(lat_stop), int(n_lat)
            m.lon_start, m.lon_stop, m.n_lon = float(lon_start), float(lon_stop), int(n_lon)
            m.dtype = pb_dtype
            for lat, lon in refs_arr:
                req.references.add(lat=float(lat), lon=float(lon))
            return req

        return self._run("HaversineGrid", make, [], keep_on_device=keep_on_device,
                         chunk_bytes=chunk_bytes, return_timing=return_timing,
                         buffer_name=buffer_name, timeout=timeout)

    def haversine_points(self, lat: ArrayLike, lon: ArrayLike, refs,
                         radius: float = DEFAULT_RADIUS_KM, *, keep_on_device: bool = False,
                         chunk_bytes: Optional[int] = None, return_timing: bool = False,
                         buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Great-circle distances from each reference to each point (lat[i], lon[i]) of
        two equal-shape arrays S in degrees; shape (n_ref, *S), dtype of lat/lon."""
        refs_arr = _references(refs)
        _check_radius(radius)
        named = [("lat", _as_array(lat, "lat")), ("lon", _as_array(lon, "lon"))]
        _same_dtype(named)

        def make(p):
            req = pb.HaversineGridRequest(radius=float(radius))
            _set_operand(req.points.lat, p["lat"])
            _set_operand(req.points.lon, p["lon"])
            for la, lo in refs_arr:
                req.references.add(lat=float(la), lon=float(lo))
            return req

        return self._run("HaversineGrid", make, named, keep_on_device=keep_on_device,
                         chunk_bytes=chunk_bytes, return_timing=return_timing,
                         buffer_name=buffer_name, timeout=timeout)

    def normalize(self, a: ArrayLike, norm: str = "sum", *, keep_on_device: bool = False,
                  chunk_bytes: Optional[int] = None, return_timing: bool = False,
                  buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Each row along the last axis divided by its norm: "sum" (x / sum x, the
        default), "l1", "l2" or "max_abs"; accumulated in float64 on the server."""
        key = str(norm).lower()
        if key not in _NORMS:
            raise ValueError(f"norm is {norm!r}; use 'sum', 'l1', 'l2' or 'max_abs'")
        named = [("input", _as_array(a, "a"))]

        def make(p):
            req = pb.NormalizeRequest(norm=_NORMS[key])
            _set_operand(req.input, p["input"])
            return req

        return self._run("Normalize", make, named, keep_on_device=keep_on_device,
                         chunk_bytes=chunk_bytes, return_timing=return_timing,
                         buffer_name=buffer_name, timeout=timeout)

    def lombscargle(self, x: ArrayLike, y: ArrayLike, freqs, precenter: bool = False,
                    normalize: Union[bool, str] = False, *, weights: Optional[ArrayLike] = None,
                    floating_mean: bool = False, keep_on_device: bool = False,
                    chunk_bytes: Optional[int] = None, return_timing: bool = False,
                    buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """scipy.signal.lombscargle(x, y, freqs, precenter, normalize, *, weights,
        floating_mean) (SciPy 1.15 semantics), computed on the server.

        x, y (and weights): (N,) or a batch (B, N) (x may stay (N,)); freqs: angular
        frequencies (M,) as an array or DeviceArray of y's dtype, or a FrequencyGrid
        generated on the server. normalize: False/"power" or True/"normalize" ("amplitude"
        is not offered). Result (M,) or (B, M), dtype of y.
        """
        if isinstance(normalize, str):
            if normalize not in ("power", "normalize"):
                raise ValueError(f"normalize is {normalize!r}; gpucompute offers False/'power' "
                                 "and True/'normalize'")
            normalize = normalize == "normalize"
        named = [("y", _as_array(y, "y")), ("x", _as_array(x, "x"))]
        if weights is not None:
            named.append(("weights", _as_array(weights, "weights")))
        grid = None
        if isinstance(freqs, FrequencyGrid):
            grid = freqs
            if int(grid.count) != grid.count or grid.count < 1:
                raise ValueError(f"FrequencyGrid count is {grid.count}; it must be >= 1")
        else:
            named.append(("freqs", _as_array(freqs, "freqs")))
        _same_dtype(named)

        def make(p):
            req = pb.LombScargleRequest(precenter=bool(precenter), normalize=bool(normalize),
                                        floating_mean=bool(floating_mean))
            _set_operand(req.x, p["x"])
            _set_operand(req.y, p["y"])
            if "weights" in p:
                _set_operand(req.weights, p["weights"])
            if grid is not None:
                req.freq_grid.start = float(grid.start)
                req.freq_grid.stop = float(grid.stop)
                req.freq_grid.count = int(grid.count)
            else:
                _set_operand(req.freqs, p["freqs"])
            return req

        return self._run("LombScargle", make, named, keep_on_device=keep_on_device,
                         chunk_bytes=chunk_bytes, return_timing=return_timing,
                         buffer_name=buffer_name, timeout=timeout)


def _serialize(message) -> bytes:
    return message.SerializeToString()


def _check_radius(radius: float) -> None:
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius is {radius}; it must be positive and finite")
