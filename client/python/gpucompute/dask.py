"""Dask arrays computed block by block on gpucompute servers: one job over many servers.

    import dask.array as da, gpucompute.dask as gcd
    values = da.from_array(values_np, chunks=(20, 4000, 5))   # (D, M, O), 20 rows a block
    cv = gcd.discount_product(factors, values)                  # lazy, like any dask array
    cv.compute()                          # each block one call to a server, in parallel

Each function takes dask arrays (or anything ``dask.array.asarray`` takes) and returns a
dask array whose every block is one call of the same ``Client`` method. Which
server a block's call goes to is decided where the block runs:

1. the target the ``Servers`` worker plugin bound to this Dask worker (one server per
   worker, e.g. the one on the worker's host or its GPU);
2. else ``$GPUCOMPUTE_TARGET`` in the worker's (or this process's) environment;
3. else the function's ``target=`` argument, else ``localhost:50051``.

A block goes through POSIX shared memory when the server allows it
(``--allow_shared_memory``) and runs on the same host, so a block crosses no socket;
otherwise over gRPC. Every call has a deadline (``timeout=``), so no task waits forever.

A failing block raises the client's exception (``gpucompute.Unavailable``, ...) with a
message naming the function, the block index and the server. Under
``distributed``, a worker whose server stopped answering (the call failed and a health
check of the server then fails too) leaves the cluster gracefully: its finished blocks
move to the other workers and its tasks are rescheduled on them, so the job finishes on
the servers still up. The last worker standing raises instead of leaving.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import dask.array as da
import numpy as np

from ._types import DEFAULT_RADIUS_KM, Array, FrequencyGrid
from .client import Client
from .errors import FailedPrecondition, GpuComputeError

__all__ = ["Servers", "server_target", "discount_product", "normalize", "haversine_points",
           "lombscargle",
           "TARGET_ENV", "DEFAULT_TARGET", "DEFAULT_TIMEOUT"]

#: the environment variable naming a worker's server
TARGET_ENV = "GPUCOMPUTE_TARGET"
#: the server of a block when nothing else names one
DEFAULT_TARGET = "localhost:50051"
#: seconds one block's call may take, by default (its uploads and result included)
DEFAULT_TIMEOUT = 300.0
# How long a failed block waits for the server's health answer before calling it lost.
_HEALTH_TIMEOUT_S = 2.0
# Blocks smaller than this go over gRPC even where shared memory works: registering and
# freeing two regions costs four small calls, more than sending the bytes.
_SHARED_MIN_BYTES = 1 << 20

_log = logging.getLogger(__name__)
DaskArray = Any  # dask.array.Array: dask ships no type information

try:
    from distributed import Reschedule, WorkerPlugin, get_client, get_worker
except ImportError:  # dask without distributed: the local schedulers only
    WorkerPlugin = object
    get_worker = None

# worker -> the target its Servers plugin bound it to
_bound: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# workers leaving the cluster because their server was lost
_leaving: "weakref.WeakSet[Any]" = weakref.WeakSet()
_leaving_lock = threading.Lock()


class Servers(WorkerPlugin):  # type: ignore[misc]
    """A distributed worker plugin binding each worker to its own gpucompute server.

    ``targets`` is one target for every worker, which may name the worker's host or
    name as ``{host}`` and ``{name}`` (``"{host}:50051"``: the server on each worker's
    host), or a mapping from worker name (``dask-worker --name``, or LocalCluster's 0,
    1, ...) to target (one server per GPU: ``{"gpu0": "localhost:50051", ...}``);
    workers it does not name fall back to ``$GPUCOMPUTE_TARGET``.

        client.register_worker_plugin(gpucompute.dask.Servers("{host}:50051"))
    """

    name = "gpucompute-servers"

    def __init__(self, targets: Union[str, Mapping[Any, str]]):
        self.targets: Union[str, Dict[Any, str]] = (
            targets if isinstance(targets, str) else dict(targets))

    def setup(self, worker: Any) -> None:
        target = self.target_of(worker.name, worker.address)
        if target:
            _bound[worker] = target

    def teardown(self, worker: Any) -> None:
        _bound.pop(worker, None)

    def target_of(self, name: Any, address: str) -> Optional[str]:
        """The target of the worker called `name` listening on `address`."""
        if isinstance(self.targets, str):
            host = address.rpartition("://")[2].rpartition(":")[0]
            return self.targets.format(host=host, name=name)
        found = self.targets.get(name, self.targets.get(str(name)))
        return None if found is None else str(found)


def _current_worker() -> Any:
    if get_worker is None:
        return None
    try:
        return get_worker()
    except ValueError:  # not in a distributed worker
        return None


def server_target(fallback: Optional[str] = None) -> str:
    """The server a block run here calls (``fallback``: the function's ``target=``); e.g.
    ``client.run(gpucompute.dask.server_target)`` shows each worker's."""
    worker = _current_worker()
    if worker is not None and worker in _bound:
        return _bound[worker]
    return os.environ.get(TARGET_ENV) or fallback or DEFAULT_TARGET


class _Connection:
    """This process's client of one server; whether its shared memory is usable."""

    def __init__(self, target: str):
        self.client = Client(target)
        self.shared: Optional[bool] = None  # None: not tried yet


_connections: Dict[str, _Connection] = {}
_connections_lock = threading.Lock()


def _connection(target: str) -> _Connection:
    with _connections_lock:
        if target not in _connections:
            _connections[target] = _Connection(target)
        return _connections[target]


Call = Callable[[Client, Sequence[Array], Optional[Array]], Any]


def _through_shared_memory(conn: _Connection, call: Call, inputs: Sequence[Array],
                           shape: Tuple[int, ...], dtype: np.dtype[Any],
                           timeout: float) -> Optional[Array]:
    """The call with inputs and result in shared memory; None where the server has none
    for this process (then remembered)."""
    client = conn.client
    sizes = [(a.nbytes + 63) // 64 * 64 for a in inputs]  # each operand 64-byte aligned
    try:
        staging = client.shared_array(max(sum(sizes), 1), np.uint8, timeout=timeout)
    except FailedPrecondition:  # shared memory off, or another host
        conn.shared = False
        return None
    conn.shared = True
    try:
        views: List[Array] = []
        offset = 0
        for a, size in zip(inputs, sizes):
            view: Array = np.ndarray(a.shape, a.dtype, buffer=staging, offset=offset)
            view[...] = a
            views.append(view)
            offset += size
        out: Array = client.shared_array(shape, dtype, timeout=timeout)
        try:
            call(client, views, out)
        finally:
            # The result stays mapped in this process after the region is unregistered.
            client.free_shared(out, timeout=timeout)
        return out
    finally:
        client.free_shared(staging, timeout=timeout)


def _server_lost(conn: _Connection) -> bool:
    try:
        return conn.client.health(timeout=_HEALTH_TIMEOUT_S) != "SERVING"
    except GpuComputeError:
        return True


def _leave_cluster(worker: Any, why: str) -> bool:
    """Starts this worker's graceful exit (its data moves to the others); False when no
    other worker is running, so that the caller raises rather than leave none."""
    with _leaving_lock:  # the worker's other threads see the same lost server
        if worker in _leaving:
            return True
        try:
            workers = get_client().scheduler_info()["workers"]
        except Exception:  # noqa: BLE001 - no scheduler answer: do not leave blind
            return False
        if not any(address != worker.address and info.get("status", "running") == "running"
                   for address, info in workers.items()):
            return False
        _leaving.add(worker)
    _log.warning("gpucompute: worker %s leaves the cluster: %s", worker.address, why)
    worker.loop.add_callback(worker.close_gracefully, reason=f"gpucompute server lost: {why}")
    return True


def _run_block(function: str, block_id: Optional[Tuple[int, ...]], fallback: Optional[str],
               timeout: float, call: Call, inputs: Sequence[Array],
               shape: Tuple[int, ...], dtype: Any) -> Array:
    """One block's call on this worker's server; errors name the block and the server."""
    target = server_target(fallback)
    conn = _connection(target)
    dtype = np.dtype(dtype)
    try:
        nbytes = sum(a.nbytes for a in inputs) + int(np.prod(shape)) * dtype.itemsize
        if conn.shared is not False and nbytes >= _SHARED_MIN_BYTES:
            out = _through_shared_memory(conn, call, inputs, shape, dtype, timeout)
            if out is not None:
                return out
        result: Array = np.asarray(call(conn.client, inputs, None))
        return result
    except GpuComputeError as e:
        where = f"gpucompute.dask.{function} block {block_id} on {target}"
        lost = _server_lost(conn)
        worker = _current_worker()
        if lost and worker is not None and _leave_cluster(worker, f"{where}: {e}"):
            raise Reschedule() from None
        message = f"{where}: {e.message}" + (" (the server does not answer)" if lost else "")
        raise type(e)(e.code, message, method=e.method, call=e.call) from None


def _block_shape(*arrays: Any) -> Tuple[int, ...]:
    return tuple(np.broadcast_shapes(*(np.shape(a) for a in arrays)))


def _float_dtype(name: str, *arrays: Any) -> np.dtype[Any]:
    dtypes = {np.dtype(a.dtype) for a in arrays}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (np.float32, np.float64):
        raise TypeError(f"{name}: operands are {sorted(map(str, dtypes))}; give float32 or "
                        "float64 arrays of one dtype")
    return next(iter(dtypes))


# -- discount product ----------------------------------------------------------------


def _discount_block(factors: Array, values: Array, *, target: Optional[str],
                    timeout: float, block_id: Optional[Tuple[int, ...]] = None) -> Array:
    return _run_block("discount_product", block_id, target, timeout,
                      lambda c, ins, out: c.discount_product(*ins, out=out, timeout=timeout),
                      (factors, values), _block_shape(factors, values), values.dtype)


def discount_product(factors: Any, values: Any, *, target: Optional[str] = None,
                     timeout: float = DEFAULT_TIMEOUT) -> DaskArray:
    """factors * values with NumPy broadcasting (the seed: (M, O) * (D, M, O)), a block of
    the result per block of values: split values along their leading axes; factors
    follow values' chunks on the axes they share (whole, when factors are one block)."""
    factors, values = da.asarray(factors), da.asarray(values)
    dtype = _float_dtype("discount_product", factors, values)
    ndim = max(factors.ndim, values.ndim)
    return da.map_blocks(_discount_block, factors, values, dtype=dtype,
                         meta=np.empty((0,) * ndim, dtype), name="gpucompute-discount_product",
                         target=target, timeout=timeout)


# -- normalize -----------------------------------------------------------------------


def _normalize_block(a: Array, *, norm: str, axis: int, target: Optional[str],
                     timeout: float, block_id: Optional[Tuple[int, ...]] = None) -> Array:
    rows = np.moveaxis(a, axis, -1)
    out = _run_block("normalize", block_id, target, timeout,
                     lambda c, ins, out: c.normalize(ins[0], norm=norm, out=out, timeout=timeout),
                     (rows,), rows.shape, a.dtype)
    return np.moveaxis(out, -1, axis)


def normalize(a: Any, *, norm: str = "sum", axis: int = -1, target: Optional[str] = None,
              timeout: float = DEFAULT_TIMEOUT) -> DaskArray:
    """Each row along `axis` divided by its norm ("sum", "l1", "l2" or "max_abs"), as
    Client.normalize. Rows are never split: `axis` is rechunked whole, blocks split the
    other axes."""
    a = da.asarray(a)
    dtype = _float_dtype("normalize", a)
    if a.ndim == 0:
        raise ValueError("normalize: a is a scalar; give an array of rows")
    axis = int(axis)
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"normalize: axis {axis} is out of range for {a.ndim} dimensions")
    axis %= a.ndim
    a = a.rechunk({axis: -1})
    return a.map_blocks(_normalize_block, dtype=dtype, meta=np.empty((0,) * a.ndim, dtype),
                        name="gpucompute-normalize", norm=norm, axis=axis, target=target,
                        timeout=timeout)


# -- haversine -----------------------------------------------------------------------


def _haversine_block(lat: Array, lon: Array, *, refs: Array, radius: float,
                     target: Optional[str], timeout: float,
                     block_id: Optional[Tuple[int, ...]] = None) -> Array:
    return _run_block("haversine_points", block_id, target, timeout,
                      lambda c, ins, out: c.haversine_points(ins[0], ins[1], refs, radius=radius,
                                                             out=out,
                                                             timeout=timeout),
                      (lat, lon), (len(refs),) + lat.shape, lat.dtype)


def haversine_points(lat: Any, lon: Any, refs: Any, *,
                     radius: float = DEFAULT_RADIUS_KM, target: Optional[str] = None,
                     timeout: float = DEFAULT_TIMEOUT) -> DaskArray:
    """Great-circle distances from each reference (lat, lon) to each point (lat[i], lon[i])
    of two equal-shape arrays S in degrees, as Client.haversine_points: shape
    (n_ref, *S); blocks follow lat's chunks, the references go whole with each."""
    lat, lon = da.asarray(lat), da.asarray(lon)
    dtype = _float_dtype("haversine_points", lat, lon)
    if lat.shape != lon.shape:
        raise ValueError(f"haversine_points: lat {lat.shape} and lon {lon.shape} differ in shape")
    r = np.asarray(refs, dtype=np.float64).reshape(-1, 2) if np.size(refs) else np.empty((0, 2))
    if r.shape[0] == 0 or np.ndim(refs) not in (1, 2) or np.shape(refs)[-1] != 2:
        raise ValueError(f"haversine_points: refs has shape {np.shape(refs)}; give a (lat, lon) "
                         "pair or a sequence of them")
    lon = lon.rechunk(lat.chunks)
    return da.map_blocks(_haversine_block, lat, lon, dtype=dtype, new_axis=0,
                         chunks=((len(r),),) + lat.chunks,
                         meta=np.empty((0,) * (lat.ndim + 1), dtype),
                         name="gpucompute-haversine_points", refs=r, radius=float(radius),
                         target=target, timeout=timeout)


# -- Lomb-Scargle --------------------------------------------------------------------


def _lombscargle_block(*arrays: Array, freqs: Any, options: Dict[str, Any],
                       n_freqs: int, result_dtype: Any, target: Optional[str], timeout: float,
                       block_id: Optional[Tuple[int, ...]] = None) -> Array:
    # arrays: y, x[, weights]
    return _run_block("lombscargle", block_id, target, timeout,
                      lambda c, ins, out: c.lombscargle(
                          ins[1], ins[0], freqs, weights=ins[2] if len(ins) > 2 else None,
                          out=out, timeout=timeout, **options),
                      arrays, (arrays[0].shape[0], n_freqs), result_dtype)


def lombscargle(x: Any, y: Any, freqs: Any, *, precenter: bool = False,
                normalize: Union[bool, str] = False, weights: Any = None,
                floating_mean: bool = False, method: str = "auto",
                accuracy: Optional[float] = None, target: Optional[str] = None,
                timeout: float = DEFAULT_TIMEOUT) -> DaskArray:
    """Client.lombscargle over a batch of series y (B, N), one block of series per task:
    y (and x and weights when 2-D) split along the series axis only (each series whole),
    x (N,) and the frequency grid shared by every block. freqs: an array (M,) or a
    FrequencyGrid. Result (B, M), chunked as y's series; "amplitude" is
    complex."""
    y = da.asarray(y)
    if y.ndim != 2:
        raise ValueError(f"lombscargle: y has shape {y.shape}; give a batch of series (B, N)")
    y = y.rechunk({1: -1})
    operands = [y]
    for name, v in (("x", x), ("weights", weights)):
        if v is None:
            continue
        v = da.asarray(v)
        if v.ndim not in (1, 2) or v.shape[-1] != y.shape[1] or (
                v.ndim == 2 and v.shape != y.shape):
            raise ValueError(f"lombscargle: {name} has shape {v.shape}; give ({y.shape[1]},) "
                             f"or y's {y.shape}")
        operands.append(v.rechunk({0: -1}) if v.ndim == 1 else v.rechunk(y.chunks))
    dtype = _float_dtype("lombscargle", *operands)
    if not isinstance(freqs, FrequencyGrid):
        freqs = np.asarray(freqs, dtype=dtype)  # shared whole by every block
        if freqs.ndim != 1:
            raise ValueError(f"lombscargle: freqs has shape {freqs.shape}; give (M,)")
    n_freqs = int(freqs.count if isinstance(freqs, FrequencyGrid) else len(freqs))
    out_dtype = np.result_type(dtype, np.complex64) if normalize == "amplitude" else dtype
    options = dict(precenter=precenter, normalize=normalize, floating_mean=floating_mean,
                   method=method, accuracy=accuracy)
    return da.map_blocks(_lombscargle_block, *operands, dtype=out_dtype,
                         chunks=(y.chunks[0], (n_freqs,)), meta=np.empty((0, 0), out_dtype),
                         name="gpucompute-lombscargle", freqs=freqs, options=options,
                         n_freqs=n_freqs, result_dtype=out_dtype, target=target,
                         timeout=timeout)
