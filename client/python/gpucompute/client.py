"""The gpucompute Python client: NumPy arrays in, NumPy arrays (or DeviceArrays) out."""
from __future__ import annotations

import threading
import time
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc
import numpy as np

from . import _wire
from ._device_array import DeviceArray
from ._operands import (NORMS, ArrayLike, as_array, byte_view, haversine_request, result_dtype,
                        same_dtype, set_operand)
from ._pb import pb
from ._stream import ResultOptions, ResultStream
from ._types import (DEFAULT_RADIUS_KM, NP_TO_PB, BufferList, FrequencyGrid, LatLonMesh,
                     ServerInfo)
from .errors import GpuComputeError, from_rpc_error

__all__ = ["Client", "DEFAULT_UPLOAD_THRESHOLD"]

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


def _serialize(message) -> bytes:
    return message.SerializeToString()


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
        with self._lock:
            if raw.limits.max_receive_message_bytes:
                self._max_message = int(raw.limits.max_receive_message_bytes)
        return ServerInfo._from_proto(raw)

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
        arr = as_array(array, "array")
        if chunk_bytes is None:
            step = DEFAULT_UPLOAD_CHUNK
            if arr.nbytes > _UNASKED_INLINE_BYTES:  # stay below the server's message limit
                step = max(4096, min(step, self._max_message_bytes() - _MESSAGE_MARGIN))
        else:
            step = int(chunk_bytes)
            if step <= 0:
                raise ValueError(f"chunk_bytes is {chunk_bytes}; it must be > 0")
        header = pb.UploadRequest(header=pb.UploadHeader(
            name=name, dtype=NP_TO_PB[arr.dtype], shape=[int(s) for s in arr.shape]))
        view = byte_view(arr)

        def requests():
            yield header
            for off in range(0, view.nbytes, step):
                yield _wire.UploadData(view[off:off + step])

        info = self._unary(self._upload, requests(), "Buffers.Upload", timeout)
        return DeviceArray._from_info(self, info)

    def download(self, buffer: Union[DeviceArray, str], *, chunk_bytes: Optional[int] = None,
                 return_timing: bool = False, timeout: Optional[float] = None):
        """A stored buffer's contents as a NumPy array."""
        options = ResultOptions(chunk_bytes=chunk_bytes, return_timing=return_timing,
                                timeout=timeout)
        buffer_id = buffer.id if isinstance(buffer, DeviceArray) else str(buffer)
        request = pb.DownloadRequest(buffer_id=buffer_id,
                                     chunk_bytes=int(options.chunk_bytes or 0))
        start = time.perf_counter()
        array, trailer = self._collect(self._download, request, "Buffers.Download", options)
        return options.deliver(array, trailer, start)

    def delete(self, buffer: Union[DeviceArray, str], *, timeout: Optional[float] = None) -> int:
        """Free a stored buffer; returns the bytes freed."""
        if isinstance(buffer, DeviceArray):
            return buffer.delete(timeout=timeout)
        reply = self._unary(self._delete, pb.DeleteRequest(buffer_id=str(buffer)),
                            "Buffers.Delete", timeout)
        return int(reply.freed_bytes)

    def list_buffers(self, *, timeout: Optional[float] = None) -> BufferList:
        """The buffers stored by this client's principal (its token or TLS client
        certificate; every unauthenticated client shares one): the server lists the
        caller's own only."""
        reply = self._unary(self._list, pb.ListRequest(), "Buffers.List", timeout)
        out = BufferList(DeviceArray._from_info(self, b) for b in reply.buffers)
        out.used_bytes = int(reply.used_bytes)
        out.quota_bytes = int(reply.quota_bytes)
        return out

    # -- compute plumbing ------------------------------------------------------------

    def _collect(self, stub, request, method: str, options: ResultOptions):
        stream = ResultStream(options.keep_on_device)
        call = stub(request, timeout=self._deadline(options.timeout), metadata=self._metadata)
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

    def _run(self, method: str, make_request, named, options: ResultOptions):
        start = time.perf_counter()
        placed, temps, upload_s = self._place(named, options.timeout)
        try:
            request = make_request(placed)
            options.fill(request.output)
            array, trailer = self._collect(self._compute[method], request, "Compute." + method,
                                           options)
        finally:
            self._drop(temps)
        value = (DeviceArray._from_info(self, trailer.stored_buffer)
                 if options.keep_on_device else array)
        return options.deliver(value, trailer, start, upload=upload_s)

    # -- compute ---------------------------------------------------------------------

    def discount_product(self, factors: ArrayLike, values: ArrayLike, *,
                         keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                         return_timing: bool = False, buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None):
        """factors * values with NumPy broadcasting (the seed: (M, O) * (D, M, O))."""
        named = [("factors", as_array(factors, "factors")),
                 ("values", as_array(values, "values"))]
        same_dtype(named)

        def make(p):
            req = pb.DiscountProductRequest()
            set_operand(req.factors, p["factors"])
            set_operand(req.values, p["values"])
            return req

        return self._run("DiscountProduct", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout))

    def haversine_grid(self, mesh: LatLonMesh, refs, radius: float = DEFAULT_RADIUS_KM,
                       dtype=np.float64, *, keep_on_device: bool = False,
                       chunk_bytes: Optional[int] = None, return_timing: bool = False,
                       buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Great-circle distances from each reference (lat, lon) to every point of `mesh`,
        generated on the server; degrees in, `radius` units out; shape
        (n_ref, mesh.n_lat, mesh.n_lon).
        """
        if not isinstance(mesh, LatLonMesh):
            raise TypeError(f"mesh is {mesh!r}; give a gpucompute.LatLonMesh")
        request = haversine_request(refs, radius)
        request.mesh.dtype = result_dtype(dtype)
        mesh._fill(request.mesh)
        return self._run("HaversineGrid", lambda _: request, [], ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout))

    def haversine_points(self, lat: ArrayLike, lon: ArrayLike, refs,
                         radius: float = DEFAULT_RADIUS_KM, *, keep_on_device: bool = False,
                         chunk_bytes: Optional[int] = None, return_timing: bool = False,
                         buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Great-circle distances from each reference to each point (lat[i], lon[i]) of
        two equal-shape arrays S in degrees; shape (n_ref, *S), dtype of lat/lon."""
        request = haversine_request(refs, radius)
        named = [("lat", as_array(lat, "lat")), ("lon", as_array(lon, "lon"))]
        same_dtype(named)

        def make(p):
            set_operand(request.points.lat, p["lat"])
            set_operand(request.points.lon, p["lon"])
            return request

        return self._run("HaversineGrid", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout))

    def normalize(self, a: ArrayLike, norm: str = "sum", *, keep_on_device: bool = False,
                  chunk_bytes: Optional[int] = None, return_timing: bool = False,
                  buffer_name: Optional[str] = None, timeout: Optional[float] = None):
        """Each row along the last axis divided by its norm: "sum" (x / sum x, the
        default), "l1", "l2" or "max_abs"; accumulated in float64 on the server."""
        key = str(norm).lower()
        if key not in NORMS:
            raise ValueError(f"norm is {norm!r}; use 'sum', 'l1', 'l2' or 'max_abs'")
        named = [("input", as_array(a, "a"))]

        def make(p):
            req = pb.NormalizeRequest(norm=NORMS[key])
            set_operand(req.input, p["input"])
            return req

        return self._run("Normalize", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout))

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
        named = [("y", as_array(y, "y")), ("x", as_array(x, "x"))]
        if weights is not None:
            named.append(("weights", as_array(weights, "weights")))
        if not isinstance(freqs, FrequencyGrid):
            named.append(("freqs", as_array(freqs, "freqs")))
        same_dtype(named)

        def make(p):
            req = pb.LombScargleRequest(precenter=bool(precenter), normalize=bool(normalize),
                                        floating_mean=bool(floating_mean))
            set_operand(req.x, p["x"])
            set_operand(req.y, p["y"])
            if "weights" in p:
                set_operand(req.weights, p["weights"])
            if isinstance(freqs, FrequencyGrid):
                freqs._fill(req.freq_grid)
            else:
                set_operand(req.freqs, p["freqs"])
            return req

        return self._run("LombScargle", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout))
