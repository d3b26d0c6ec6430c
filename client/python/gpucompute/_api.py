"""The public methods of both clients, written once as generators of RPC steps.

``ClientApi`` is generic in what its methods return: ``client.Client`` binds the results
themselves (it blocks), ``aio.Client`` binds awaitables of them.
"""
from __future__ import annotations

import threading
import time
from typing import (Any, Callable, Dict, Generic, List, Optional, Sequence, Tuple,
                    TypeVar, Union, cast)

import numpy as np

from . import _heap, _shared_memory, _stripe_workers
from ._heap import DEFAULT_HEAP_WARMUP
from ._device_array import DeviceArray
from ._operands import (NORMS, ArrayLike, Operand, as_array, haversine_request, result_dtype,
                        same_dtype, set_operand)
from ._pb import pb
from ._steps import Run, Steps, Stream, Unary, make_stubs
from ._stream import ResultOptions, ResultStream
from ._streaming import StreamingMethods
from ._transfers import (_MESSAGE_MARGIN, _UNASKED_INLINE_BYTES, DEFAULT_STRIPE_BYTES,
                         TransferMethods)
from ._types import (DEFAULT_RADIUS_KM, Array, BufferList, FrequencyGrid, LatLonMesh,
                     ServerInfo)
from .errors import FailedPrecondition, GpuComputeError

#: inline operands larger than this go through Buffers.Upload automatically
DEFAULT_UPLOAD_THRESHOLD = 8 << 20
#: a message size every gRPC server accepts (its default limit), assumed when the
#: server's own limit cannot be read
_SAFE_MESSAGE_BYTES = 4 << 20
# Inline inputs up to this size try the one-message (unary) read first; larger ones
# stream at once, since a result too large for one message is refused and the whole
# request sent again (an 8 MiB normalize: 28 -> 43 ms on the CPU backend).
_SMALL_INPUT_BYTES = 1 << 20
#: lombscargle's method names
_LOMB_SCARGLE_METHODS = {"auto": pb.LOMB_SCARGLE_METHOD_AUTO,
                         "direct": pb.LOMB_SCARGLE_METHOD_DIRECT,
                         "nufft": pb.LOMB_SCARGLE_METHOD_NUFFT}
#: lombscargle's normalize values as SciPy spells them
_LOMB_SCARGLE_NORMALIZATIONS = ("power", "normalize", "amplitude")


def _normalization(normalize: Union[bool, str]) -> str:
    """SciPy's normalize argument (False/"power", True/"normalize", "amplitude") by name."""
    if isinstance(normalize, (bool, np.bool_)):
        return "normalize" if normalize else "power"
    if isinstance(normalize, str) and normalize in _LOMB_SCARGLE_NORMALIZATIONS:
        return normalize
    raise ValueError(f"normalize is {normalize!r}; use False (or 'power'), True (or 'normalize'), "
                     "or 'amplitude'")


def _ragged(x: Any, y: Sequence[ArrayLike], weights: Any) -> Tuple[Any, Any, Any, List[int]]:
    """Series of their own lengths as flat x, y, weights and their row offsets."""
    if not isinstance(x, (list, tuple)) or len(x) != len(y) or not y:
        raise ValueError("a ragged batch needs x and y as lists of equal, non-zero length")
    if weights is not None and (not isinstance(weights, (list, tuple)) or len(weights) != len(y)):
        raise ValueError("weights of a ragged batch must be a list like y (or None)")
    ys = [np.asarray(v) for v in y]
    xs = [np.asarray(v, dtype=ys[0].dtype) for v in x]
    if any(a.ndim != 1 or b.shape != a.shape for a, b in zip(xs, ys)):
        raise ValueError("each series of a ragged batch needs 1-D x and y of one length")
    offsets = [0] + [int(v) for v in np.cumsum([len(v) for v in ys])]
    flat_w = None if weights is None else np.concatenate(
        [np.asarray(w, dtype=ys[0].dtype) for w in weights])
    return np.concatenate(xs), np.concatenate(ys), flat_w, offsets



# What each kind of method returns (the value, or an awaitable of it).
ResultT = TypeVar("ResultT")        # compute methods and download: _stream.Result
DeviceArrayT = TypeVar("DeviceArrayT")
StrT = TypeVar("StrT")
ServerInfoT = TypeVar("ServerInfoT")
IntT = TypeVar("IntT")
BufferListT = TypeVar("BufferListT")
LimitT = TypeVar("LimitT")

Named = List[Tuple[str, Operand]]
Placed = Dict[str, Operand]


class ClientApi(StreamingMethods[ResultT], TransferMethods[ResultT, DeviceArrayT],
                Generic[ResultT, DeviceArrayT, StrT, ServerInfoT, IntT, BufferListT]):
    """Connection settings and every public method; a subclass runs the steps (``_perform``).

    Parameters (of both clients)
    ----------
    target: "host:port".
    credentials: grpc.ChannelCredentials for TLS (e.g. grpc.ssl_channel_credentials());
        None for a plaintext channel.
    token: sent with every call as "authorization: Bearer <token>" metadata.
    timeout: default deadline of every call, in seconds (None: none). A call's timeout
        covers the whole call: the uploads it makes first and its result stream.
    upload_threshold: inline operands larger than this many bytes are uploaded as
        temporary buffers first (and deleted after the call); also whenever the inline
        operands together would pass the server's message limit.
    options: extra grpc channel options.
    stripes: downloads and uploads larger than ``stripe_bytes`` run as ranges of that
        size, this many at once, each on its own connection: downloads are written in
        place into the result, uploads go into one upload session (a stripe whose
        connection breaks is sent or fetched again); array inputs of
        stream_discount_product and stream_normalize larger than ``stripe_bytes`` run as
        up to this many calls at once over ranges of their first axis; the first failing
        range fails the call and cancels the others; 1: one stream.
    stripe_processes: run those stripes in ``stripes`` worker processes (started at the
        first striped call, each with its own connection; not with credentials) instead
        of threads of this one, whose GIL holds them to one core's worth of grpcio's
        copying (~2 GB/s); inputs are copied once into shared memory for them (not those
        made with Client.stripe_array), results come back in shared memory.
    session: send the compute calls whose result comes as one message over one open
        Compute.Session call (opened at the first such call, again after it breaks)
        instead of a call each, where the server has sessions; results and exceptions
        are those of the calls.
    heap_warmup: bytes of this process's heap (glibc only) made ready at connect time
        for results, once per process (``_heap``): a first result up to this size then
        costs what later ones do, not the kernel's zeroing of fresh pages (~2 ms more for
        8 MiB); the process keeps them resident. 0: none. At most 30 MiB.
    """

    #: False where calls return awaitables (DeviceArray.__array__ cannot download then)
    blocking = True

    def __init__(self, target: str, *, credentials: Optional[Any] = None,
                 token: Optional[str] = None, timeout: Optional[float] = None,
                 upload_threshold: int = DEFAULT_UPLOAD_THRESHOLD,
                 options: Sequence[Tuple[str, Any]] = (), stripes: int = 1,
                 stripe_bytes: int = DEFAULT_STRIPE_BYTES, stripe_processes: bool = False,
                 session: bool = True, heap_warmup: int = DEFAULT_HEAP_WARMUP):
        self.target = target
        self.timeout = timeout
        self.upload_threshold = int(upload_threshold)
        # HTTP/2 frames up to 16 MiB (gRPC's default is 16 KiB), as the server and
        # the C++ client advertise (bench/BULK_TRANSFER.md, transport settings).
        self._channel_options = [("grpc.max_receive_message_length", -1),
                                 ("grpc.max_send_message_length", -1),
                                 ("grpc.http2.max_frame_size", (1 << 24) - 1)] + list(options)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._max_message: Optional[int] = None
        #: whether the server honours OutputOptions.single_message (None: not asked yet)
        self._single_message: Optional[bool] = None
        self.session = bool(session)
        #: whether the server has Compute.Session (None: not asked yet)
        self._sessions: Optional[bool] = None
        self._lock = threading.Lock()
        if int(stripes) < 1 or int(stripe_bytes) < 1:
            raise ValueError(f"stripes {stripes} and stripe_bytes {stripe_bytes} must be >= 1")
        self.stripes, self.stripe_bytes = int(stripes), int(stripe_bytes)
        self._workers: Optional[_stripe_workers.StripeWorkers] = None
        if stripe_processes and self.stripes > 1:
            if credentials is not None:
                raise ValueError("stripe_processes: credentials cannot pass to other "
                                 "processes (a token can)")
            self._workers = _stripe_workers.StripeWorkers(self.stripes, dict(
                target=target, token=token, options=list(options)))
        self._channel = self._connect(credentials, self._channel_options)
        # Each stripe channel has its own connection (gRPC shares one between channels of
        # equal options otherwise); process stripes have theirs in the workers.
        self._stripe_channels = [
            self._connect(credentials, self._channel_options
                          + [("grpc.use_local_subchannel_pool", 1)])
            for _ in range(self.stripes - 1 if self._workers is None else 0)]
        self._stubs = make_stubs(self._channel)
        self._stripe_stubs = [self._stubs] + [make_stubs(c) for c in self._stripe_channels]
        self._shared = _shared_memory.SharedRegions()
        _heap.warm(heap_warmup)
        self._start()

    def _start(self) -> None:
        """Begins, without waiting, what a first call would otherwise pay for."""

    def __repr__(self) -> str:
        return f"{type(self).__module__}.{type(self).__name__}({self.target!r})"

    def _empty(self, shape: Sequence[int], dtype: Any) -> Array:
        """A striped result's array: in shared memory that stripe processes write."""
        if self._workers is None:
            return np.empty(shape, dtype)
        return _stripe_workers.empty(shape, dtype)

    def _connect(self, credentials: Optional[Any], options: List[Tuple[str, Any]]) -> Any:
        """A grpc.Channel or a grpc.aio.Channel to self.target."""
        raise NotImplementedError

    def _perform(self, run: Run[Any]) -> Any:
        """Runs every step of ``run``; returns its result (or an awaitable of it)."""
        raise NotImplementedError

    def _call(self, name: str, timeout: Optional[float], steps: Steps[Any]) -> Any:
        return self._perform(Run(name, timeout, self.timeout, steps))

    # -- server --------------------------------------------------------------------

    def health(self, service: str = "", *, timeout: Optional[float] = None) -> StrT:
        """grpc.health.v1 status: "SERVING", "NOT_SERVING", ... ("" = the whole server)."""
        return cast(StrT, self._call("health", timeout, self._unary("Health.Check", service)))

    def info(self, *, timeout: Optional[float] = None) -> ServerInfoT:
        return cast(ServerInfoT, self._call("info", timeout, self._info()))

    def _unary(self, rpc: str, request: Any) -> Steps[Any]:
        return (yield Unary(rpc, request))

    def _info(self) -> Steps[ServerInfo]:
        raw = yield Unary("Server.GetInfo", pb.GetInfoRequest())
        self._remember_limits(raw)
        return ServerInfo._from_proto(raw)

    def _remember_limits(self, raw: Any) -> None:
        with self._lock:
            if raw.limits.max_receive_message_bytes:
                self._max_message = int(raw.limits.max_receive_message_bytes)
            self._single_message = bool(raw.limits.single_message_results)
            self._sessions = bool(raw.limits.sessions)

    def _known_max_message(self) -> Optional[int]:
        with self._lock:
            return self._max_message

    def _known_single_message(self) -> Optional[bool]:
        with self._lock:
            return self._single_message

    def _limit(self, known: Callable[[], Optional[LimitT]], fallback: LimitT) -> Steps[LimitT]:
        """A server limit, asked once per client (GetInfo); `fallback` while unknown."""
        value = known()
        if value is not None:
            return value
        try:
            yield from self._info()
        except GpuComputeError:
            return fallback  # not cached: the next call asks again
        value = known()
        return fallback if value is None else value

    def _max_message_bytes(self) -> Steps[int]:
        return (yield from self._limit(self._known_max_message, _SAFE_MESSAGE_BYTES))

    def _single_message_results(self) -> Steps[bool]:
        """Whether compute calls may be read as unary calls."""
        return (yield from self._limit(self._known_single_message, False))

    # -- buffers -------------------------------------------------------------------

    def delete(self, buffer: Union[DeviceArray, str], *,
               timeout: Optional[float] = None) -> IntT:
        """Free a stored buffer; returns the bytes freed (a DeviceArray's handle: 0 when
        it deleted the buffer before)."""
        return cast(IntT, self._call("delete", timeout, self._delete(buffer)))

    def _delete(self, buffer: Union[DeviceArray, str], cleanup: bool = False) -> Steps[int]:
        if isinstance(buffer, DeviceArray) and buffer.deleted:
            return 0
        buffer_id = buffer.id if isinstance(buffer, DeviceArray) else str(buffer)
        reply = yield Unary("Buffers.Delete", pb.DeleteRequest(buffer_id=buffer_id), cleanup)
        if isinstance(buffer, DeviceArray):
            buffer._deleted = True
        return int(reply.freed_bytes)

    def list_buffers(self, *, timeout: Optional[float] = None) -> BufferListT:
        """The buffers stored by this client's principal (its token or TLS client
        certificate; every unauthenticated client shares one): the server lists the
        caller's own only."""
        return cast(BufferListT, self._call("list_buffers", timeout, self._list_buffers()))

    def _list_buffers(self) -> Steps[BufferList]:
        # The server answers a page at a time; follow next_page_token to the end.
        reply = yield Unary("Buffers.List", pb.ListRequest())
        infos = list(reply.buffers)
        while reply.next_page_token:
            reply = yield Unary("Buffers.List", pb.ListRequest(page_token=reply.next_page_token))
            infos.extend(reply.buffers)
        out = BufferList(DeviceArray._from_info(self, b) for b in infos)
        out.used_bytes = int(reply.used_bytes)
        out.quota_bytes = int(reply.quota_bytes)
        return out

    # -- shared memory (same host) ---------------------------------------------------

    def shared_array(self, shape: Any, dtype: Any = np.float64, *, name: str = "",
                     timeout: Optional[float] = None) -> Any:
        """A NumPy array in POSIX shared memory that the server has mapped (the fastest
        path for a client on the server's host; the server needs --allow_shared_memory).

        Fill it and pass it (or any C-contiguous slice of it) to any method: the request
        names where it lies and no bytes cross gRPC; as ``out=`` the server writes the
        result into it. Freed by ``free_shared`` or when the client closes.
        """
        return self._call("shared_array", timeout,
                          _shared_memory.new_shared_array(self, shape, dtype, name))

    def free_shared(self, array: Any, *, timeout: Optional[float] = None) -> Any:
        """Unregisters the shared memory holding ``array`` (a shared_array, or a device
        array passed before); returns the bytes freed (0 when none was registered). The
        server answers once no request uses the memory any more."""
        return self._call("free_shared", timeout, _shared_memory.free(self, array))

    def shared_memory_status(self, *, timeout: Optional[float] = None) -> Any:
        """The caller's registered regions (pb.SharedMemoryStatusResponse)."""
        return self._call("shared_memory_status", timeout,
                          self._unary("SharedMemory.SharedMemoryStatus",
                                      pb.SharedMemoryStatusRequest()))

    def stripe_array(self, shape: Any, dtype: Any = np.float64) -> Array:
        """An empty NumPy array in memory the stripe processes share
        (``stripe_processes=True``): an input made in it reaches them without the copy
        into shared memory, a result written into it (``out=``) without a copy back (fill
        it by slices on several threads: NumPy drops the GIL). Freed with its last view.
        Without stripe processes a plain np.empty; not awaited in gpucompute.aio."""
        dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
        return self._empty(dims, dtype)

    def _free_all_shared(self) -> Steps[None]:
        return (yield from _shared_memory.free_all(self))

    # -- compute plumbing ------------------------------------------------------------

    def _place(self, named: Named) -> Steps[Tuple[Placed, List[DeviceArray], float]]:
        """Uploads the inline operands that are too large to send inline.

        Returns ({field: ndarray or DeviceArray}, [temporary DeviceArrays], seconds).
        """
        named = yield from _shared_memory.place_shared(self, named)
        placed: Placed = dict(named)
        inline = [(n, v) for n, v in named if isinstance(v, np.ndarray)]
        total = sum(v.nbytes for _, v in inline)
        big = [n for n, v in inline if v.nbytes > self.upload_threshold]
        known = self._known_max_message()
        if not big and total <= (_UNASKED_INLINE_BYTES if known is None
                                 else known - _MESSAGE_MARGIN):
            return placed, [], 0.0
        limit = max((yield from self._max_message_bytes()) - _MESSAGE_MARGIN, 0)
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
                    assert isinstance(v, np.ndarray)
                    handle = yield from self._upload(v, f"gpucompute-py tmp {n}", None)
                    temps.append(handle)
                    placed[n] = handle
        except BaseException:
            yield from self._drop(temps)
            raise
        return placed, temps, time.perf_counter() - start

    def _drop(self, temps: List[DeviceArray]) -> Steps[None]:
        for handle in temps:
            try:
                yield from self._delete(handle, cleanup=True)
            except GpuComputeError:
                pass

    def _compute(self, method: str, make_request: Callable[[Placed], Any], named: Named,
                 options: ResultOptions) -> Steps[Any]:
        start = time.perf_counter()
        placed, temps, upload_s = yield from self._place(named)
        sink = ResultStream(options)
        try:
            out_slice = yield from _shared_memory.shared_output(self, options.out)
            request = make_request(placed)
            options.fill(request.output)
            if out_slice is not None:
                out_slice.fill(request.output.shared_memory)
                sink.shared_out = True
            # A refused one-message try re-sends the request: only worth it for small inputs.
            small = sum(a.nbytes for _, a in named if isinstance(a, np.ndarray)) <= _SMALL_INPUT_BYTES
            array = yield from self._result(method, request, sink, try_single_message=small)
        finally:
            yield from self._drop(temps)
        value = (DeviceArray._from_info(self, sink.trailer.stored_buffer)
                 if options.keep_on_device else array)
        return options.deliver(value, sink.trailer, start, upload=upload_s)

    def _result(self, method: str, request: Any, sink: ResultStream,
                try_single_message: bool) -> Steps[Any]:
        """The call as one message read as a unary call (cheaper per call) where asked
        and the server promises one; as a stream when it has none or refuses (a result
        larger than one chunk is refused before it runs)."""
        if try_single_message and (yield from self._single_message_results()):
            request.output.single_message = True
            with self._lock:
                session = self.session and bool(self._sessions)
            try:
                return (yield Stream("Compute." + method, request, sink, unary=True,
                                     session=session))
            except FailedPrecondition as e:
                if e.reason != "RESULT_TOO_LARGE_FOR_ONE_MESSAGE":
                    raise
            request.output.single_message = False
            sink.reset()
        return (yield Stream("Compute." + method, request, sink))

    def _run(self, name: str, method: str, make_request: Callable[[Placed], Any],
             named: Named, options: ResultOptions) -> ResultT:
        return cast(ResultT, self._call(name, options.timeout,
                                        self._compute(method, make_request, named, options)))

    # -- compute ---------------------------------------------------------------------
    # Every compute method also takes, keyword-only: out= (write the result into this
    # C-contiguous NumPy array of its shape and dtype), keep_on_device=, chunk_bytes=,
    # return_timing=, buffer_name= and timeout= (see ResultOptions).

    def discount_product(self, factors: ArrayLike, values: ArrayLike, *,
                         out: Optional[Array] = None, keep_on_device: bool = False,
                         chunk_bytes: Optional[int] = None, return_timing: bool = False,
                         buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None) -> ResultT:
        """factors * values with NumPy broadcasting (the seed: (M, O) * (D, M, O))."""
        named: Named = [("factors", as_array(factors, "factors")),
                        ("values", as_array(values, "values"))]
        same_dtype(named)

        def make(p: Placed) -> Any:
            req = pb.DiscountProductRequest()
            set_operand(req.factors, p["factors"])
            set_operand(req.values, p["values"])
            return req

        return self._run("discount_product", "DiscountProduct", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out))

    def haversine_grid(self, mesh: LatLonMesh, refs: ArrayLike, *,
                       radius: float = DEFAULT_RADIUS_KM, dtype: Any = np.float64,
                       out: Optional[Array] = None, keep_on_device: bool = False,
                       chunk_bytes: Optional[int] = None, return_timing: bool = False,
                       buffer_name: Optional[str] = None,
                       timeout: Optional[float] = None) -> ResultT:
        """Great-circle distances from each reference (lat, lon) to every point of `mesh`,
        generated on the server; degrees in, `radius` units out; shape
        (n_ref, mesh.n_lat, mesh.n_lon).
        """
        if not isinstance(mesh, LatLonMesh):
            raise TypeError(f"mesh is {mesh!r}; give a gpucompute.LatLonMesh")
        request = haversine_request(refs, radius)
        request.mesh.dtype = result_dtype(dtype)
        mesh._fill(request.mesh)
        return self._run("haversine_grid", "HaversineGrid", lambda _: request, [],
                         ResultOptions(keep_on_device, chunk_bytes, return_timing,
                                       buffer_name, timeout, out))

    def haversine_points(self, lat: ArrayLike, lon: ArrayLike, refs: ArrayLike, *,
                         radius: float = DEFAULT_RADIUS_KM, out: Optional[Array] = None,
                         keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                         return_timing: bool = False, buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None) -> ResultT:
        """Great-circle distances from each reference to each point (lat[i], lon[i]) of
        two equal-shape arrays S in degrees; shape (n_ref, *S), dtype of lat/lon."""
        request = haversine_request(refs, radius)
        named: Named = [("lat", as_array(lat, "lat")), ("lon", as_array(lon, "lon"))]
        same_dtype(named)

        def make(p: Placed) -> Any:
            set_operand(request.points.lat, p["lat"])
            set_operand(request.points.lon, p["lon"])
            return request

        return self._run("haversine_points", "HaversineGrid", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out))

    def normalize(self, a: ArrayLike, *, norm: str = "sum", out: Optional[Array] = None,
                  keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                  return_timing: bool = False, buffer_name: Optional[str] = None,
                  timeout: Optional[float] = None) -> ResultT:
        """Each row along the last axis divided by its norm: "sum" (x / sum x, the
        default), "l1", "l2" or "max_abs"; accumulated in float64 on the server."""
        key = str(norm).lower()
        if key not in NORMS:
            raise ValueError(f"norm is {norm!r}; use 'sum', 'l1', 'l2' or 'max_abs'")
        named: Named = [("input", as_array(a, "a"))]

        def make(p: Placed) -> Any:
            req = pb.NormalizeRequest(norm=NORMS[key])
            set_operand(req.input, p["input"])
            return req

        return self._run("normalize", "Normalize", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out))

    def lombscargle(self, x: ArrayLike, y: ArrayLike, freqs: Union[ArrayLike, FrequencyGrid],
                    *, precenter: bool = False, normalize: Union[bool, str] = False,
                    weights: Optional[ArrayLike] = None, floating_mean: bool = False,
                    method: str = "auto", accuracy: Optional[float] = None,
                    out: Optional[Array] = None, keep_on_device: bool = False,
                    chunk_bytes: Optional[int] = None, return_timing: bool = False,
                    buffer_name: Optional[str] = None,
                    timeout: Optional[float] = None) -> ResultT:
        """scipy.signal.lombscargle(x, y, freqs, *, precenter, normalize, weights,
        floating_mean) (SciPy 1.15 semantics), computed on the server.

        x, y (and weights): (N,) or a batch (B, N) (x may stay (N,)); freqs: angular
        frequencies (M,) as an array or DeviceArray of y's dtype, or a FrequencyGrid
        generated on the server. normalize: False/"power", True/"normalize" or "amplitude".
        Result (M,) or (B, M), dtype of y; "amplitude": complex (complex64 for float32,
        complex128 for float64), SciPy 1.15's (a + 1j b) exp(1j tau), the best-fit A + iB of
        y ~ A cos(f x) + B sin(f x) (+ c). The server sends it as (real, imaginary) pairs,
        shape (..., M, 2): a keep_on_device result stays so; out= takes a complex array of
        the result's shape (or real pairs).

        method: "direct" (sums over every sample and frequency), "nufft" (non-uniform
        FFTs, evenly spaced frequencies only: a FrequencyGrid, or freqs evenly spaced
        within rounding) or "auto" (the server picks; Timing.method says which ran).
        accuracy: the NUFFT's bound on each power's error relative to the row's
        largest power, in [1e-14, 1e-2]; None means the server's default, 1e-9.

        Series of different lengths in one request: x and y (and weights) as lists of
        1-D arrays, one per series; the result is (B, M).
        """
        if method not in _LOMB_SCARGLE_METHODS:
            raise ValueError(f"method is {method!r}; use one of {sorted(_LOMB_SCARGLE_METHODS)}")
        normalization = _normalization(normalize)
        row_offsets: List[int] = []
        if isinstance(y, (list, tuple)):
            x, y, weights, row_offsets = _ragged(x, y, weights)
        named: Named = [("y", as_array(y, "y")), ("x", as_array(x, "x"))]
        if weights is not None:
            named.append(("weights", as_array(weights, "weights")))
        if not isinstance(freqs, FrequencyGrid):
            named.append(("freqs", as_array(freqs, "freqs")))
        same_dtype(named)

        def make(p: Placed) -> Any:
            # "amplitude" by the enum; the others by the bool every server reads.
            req = pb.LombScargleRequest(precenter=bool(precenter),
                                        normalize=normalization == "normalize",
                                        floating_mean=bool(floating_mean),
                                        method=_LOMB_SCARGLE_METHODS[method],
                                        accuracy=0.0 if accuracy is None else float(accuracy),
                                        row_offsets=row_offsets)
            if normalization == "amplitude":
                req.normalization = pb.LOMB_SCARGLE_NORMALIZATION_AMPLITUDE
            set_operand(req.x, p["x"])
            set_operand(req.y, p["y"])
            if "weights" in p:
                set_operand(req.weights, p["weights"])
            if isinstance(freqs, FrequencyGrid):
                freqs._fill(req.freq_grid)
            else:
                set_operand(req.freqs, p["freqs"])
            return req

        return self._run("lombscargle", "LombScargle", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out,
            complex_pairs=normalization == "amplitude"))
