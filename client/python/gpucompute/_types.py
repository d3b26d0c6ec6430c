"""The client's value types: dtypes, server-generated grids, timings, server info."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import numpy as np
import numpy.typing as npt

from ._pb import pb

DEFAULT_RADIUS_KM = 6371.0088
#: the environment variable that names the server when a client is given no target
TARGET_VARIABLE = "GPUCOMPUTE_TARGET"


def resolve_target(target: Optional[str]) -> str:
    """``target``, else $GPUCOMPUTE_TARGET; ValueError when neither names a server."""
    if target:
        return target
    from_environment = os.environ.get(TARGET_VARIABLE, "").strip()
    if not from_environment:
        raise ValueError(f"no target: give one (e.g. \"localhost:50051\") or set "
                         f"{TARGET_VARIABLE}")
    return from_environment

#: a NumPy array of any dtype (the client's results are float32 or float64)
Array = npt.NDArray[Any]

NP_TO_PB: Dict[np.dtype[Any], int] = {np.dtype("<f4"): pb.FLOAT32, np.dtype("<f8"): pb.FLOAT64}
PB_TO_NP: Dict[int, np.dtype[Any]] = {pb.FLOAT32: np.dtype("<f4"), pb.FLOAT64: np.dtype("<f8")}


@dataclass(frozen=True)
class Timing:
    """Server-side timing of one request, in seconds, plus where it ran.

    The server's stages, in order: prepare: the request read, checked and admitted;
    queue: admitted -> started; transfer_in: inline operands copied to the device;
    compute: the operation (device time on a GPU); transfer_out: the result copied back,
    all chunks; stream_write: result chunks written to the client before the trailer
    (waiting on its flow control included), which overlaps transfer_out when streamed.
    total: accepted -> trailer sent, which is ``stages`` plus ``other`` (gRPC, the
    executor hop) less ``overlapped`` (what streamed stages ran at once), as the CLI
    prints it. Client-side: upload is the time spent uploading large operands before the
    call (0 when none), wall the whole call as the client saw it (upload, request, stream,
    assembly). method: the algorithm an operation with a choice ran (lombscargle:
    "direct" or "nufft"), else "".
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
    method: str = ""
    stream_write: float = 0.0
    prepare: float = 0.0

    @property
    def stages(self) -> float:
        """The server's stages summed: prepare, queue, in, compute, out, stream write."""
        return (self.prepare + self.queue + self.transfer_in + self.compute
                + self.transfer_out + self.stream_write)

    @property
    def other(self) -> float:
        """What the stages leave of the total (0 when they overlap past it)."""
        return max(0.0, self.total - self.stages)

    @property
    def overlapped(self) -> float:
        """How far the stages, overlapping, exceed the total (0 when they do not)."""
        return max(0.0, self.stages - self.total)

    @classmethod
    def _from_trailer(cls, trailer: Any, *, upload: float = 0.0, wall: float = 0.0) -> "Timing":
        t = trailer.timing
        return cls(queue=t.queue_us / 1e6, transfer_in=t.transfer_in_us / 1e6,
                   compute=t.compute_us / 1e6, transfer_out=t.transfer_out_us / 1e6,
                   total=t.total_us / 1e6, backend=trailer.backend, device=trailer.device,
                   upload=upload, wall=wall, method=trailer.method,
                   stream_write=t.stream_write_us / 1e6, prepare=t.prepare_us / 1e6)

    def __str__(self) -> str:
        def ms(seconds: float) -> str:
            return f"{seconds * 1e3:.3f} ms"

        rest = (f"overlapped {ms(self.overlapped)}" if self.overlapped
                else f"other {ms(self.other)}")
        parts = [f"queue {ms(self.queue)}", f"in {ms(self.transfer_in)}",
                 f"compute {ms(self.compute)}", f"out {ms(self.transfer_out)}",
                 f"stream write {ms(self.stream_write)}", f"prepare {ms(self.prepare)}",
                 rest, f"total {ms(self.total)}"]
        if self.upload:
            parts.append(f"upload {ms(self.upload)}")
        if self.wall:
            parts.append(f"wall {ms(self.wall)}")
        where = f"{self.backend} {self.device}" + (f" {self.method}" if self.method else "")
        return f"[{where}] " + ", ".join(parts)


def _check_count(name: str, value: float, message: str) -> None:
    if int(value) != value or value < 1:
        raise ValueError(f"{name} is {value}; it must be {message}")


@dataclass(frozen=True)
class FrequencyGrid:
    """np.linspace(start, stop, count) angular frequencies, generated on the server."""

    start: float
    stop: float
    count: int

    def __post_init__(self) -> None:
        _check_count("FrequencyGrid count", self.count, ">= 1")

    def numpy(self, dtype: npt.DTypeLike = np.float64) -> Array:
        """The same frequencies on the client (e.g. for a SciPy reference)."""
        return np.linspace(self.start, self.stop, int(self.count), dtype=np.float64).astype(dtype)

    def _fill(self, message: Any) -> None:
        """Sets a pb.FrequencyGrid."""
        message.start, message.stop, message.count = (float(self.start), float(self.stop),
                                                      int(self.count))


@dataclass(frozen=True)
class LatLonMesh:
    """linspace(lat_start, lat_stop, n_lat) x linspace(lon_start, lon_stop, n_lon), in
    degrees, generated on the server."""

    lat_start: float
    lat_stop: float
    n_lat: int
    lon_start: float
    lon_stop: float
    n_lon: int

    def __post_init__(self) -> None:
        _check_count("n_lat", self.n_lat, "a positive integer")
        _check_count("n_lon", self.n_lon, "a positive integer")

    def _fill(self, message: Any) -> None:
        """Sets a pb.LatLonMesh's coordinates (its dtype is the caller's)."""
        message.lat_start, message.lat_stop = float(self.lat_start), float(self.lat_stop)
        message.lon_start, message.lon_stop = float(self.lon_start), float(self.lon_stop)
        message.n_lat, message.n_lon = int(self.n_lat), int(self.n_lon)


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    description: str
    memory_bytes: int
    healthy: bool
    memory_budget_bytes: int = 0  # what all arrays on it may take (0: no budget reported)


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
    operations: Dict[str, Tuple[np.dtype[Any], ...]]
    limits: Limits
    raw: Any = field(repr=False, compare=False, default=None)
    #: this replica's id, the first 8 hex digits of every buffer id it issues
    instance_id: str = ""

    @classmethod
    def _from_proto(cls, raw: Any) -> "ServerInfo":
        lim = raw.limits
        limits = Limits(
            max_receive_message_bytes=lim.max_receive_message_bytes,
            buffer_quota_bytes=lim.buffer_quota_bytes, min_chunk_bytes=lim.min_chunk_bytes,
            max_chunk_bytes=lim.max_chunk_bytes, default_chunk_bytes=lim.default_chunk_bytes,
            max_rank=lim.max_rank, max_elements=lim.max_elements,
            executor_threads=lim.executor_threads, max_queue_depth=lim.max_queue_depth,
            max_device_queue_depth=lim.max_device_queue_depth)
        return cls(
            version=raw.version, backend=raw.backend, backend_note=raw.backend_note,
            devices=tuple(DeviceInfo(d.name, d.description, d.memory_bytes, d.healthy,
                                    d.memory_budget_bytes)
                          for d in raw.devices),
            operations={op.name: tuple(PB_TO_NP[d] for d in op.dtypes if d in PB_TO_NP)
                        for op in raw.operations},
            limits=limits, raw=raw, instance_id=raw.instance_id)
