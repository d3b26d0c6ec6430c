"""ReplicatedClient: one service run as several replicas behind one name.

A buffer lives in the replica that stored it, and its id begins with that replica's
instance id (ServerInfo.instance_id, new at every start). So this client resolves the
name itself (a Kubernetes headless Service, a DNS name with several addresses, or a
gRPC "ipv4:"/"ipv6:" address list), keeps one channel per address and asks each for
its instance id; it sends calls that name no buffer round-robin over the replicas
(retrying on another replica when one is UNAVAILABLE) and every call naming a buffer to
its owner. A buffer whose owner no address answers for any more is lost: DataLoss. A
call whose buffers live on two replicas is refused here, FailedPrecondition: the
service never copies between replicas. gRPC's own round_robin policy cannot do this:
it picks per call with no way to steer a call to the replica that holds its buffer.

    with gpucompute.ReplicatedClient("dns:///gpucompute.ml.svc.cluster.local:50051") as rc:
        a = rc.upload(x)               # on some replica
        y = rc.normalize(a)            # on a's replica
"""
from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from ._device_array import BufferList, DeviceArray
from ._types import ServerInfo, resolve_target
from .client import Client
from .errors import DataLoss, FailedPrecondition, GpuComputeError, Unavailable


#: length of the instance id that starts every buffer id (the server's kInstanceIdLength)
INSTANCE_ID_LENGTH = 8
_BUFFER_ID_LENGTH = 32
_HEX = set("0123456789abcdef")
_COMPUTE_METHODS = ("discount_product", "haversine_grid", "haversine_points", "normalize",
                    "lombscargle")


def issuing_instance(buffer_id: str) -> str:
    """The instance id that starts a well-formed buffer id; "" for anything else."""
    if len(buffer_id) != _BUFFER_ID_LENGTH or not set(buffer_id) <= _HEX:
        return ""
    return buffer_id[:INSTANCE_ID_LENGTH]


def resolve(target: str) -> List[str]:
    """One gRPC target per address of `target`: "ipv4:"/"ipv6:" lists are split,
    "dns:///host:port" and "host:port" are looked up (every A and AAAA record)."""
    if target.startswith(("ipv4:", "ipv6:")):
        scheme, _, addresses = target.partition(":")
        return [f"{scheme}:{a}" for a in addresses.split(",") if a]
    name = target[len("dns:"):] if target.startswith("dns:") else target
    if name.startswith("//"):  # dns://[authority]/host:port
        name = name[2:].partition("/")[2]
    host, _, port = name.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"target {target!r} has no port; use host:port")
    found: List[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host.strip("[]"), int(port),
                                                        type=socket.SOCK_STREAM):
        ip = sockaddr[0]
        address = f"ipv6:[{ip}]:{port}" if family == socket.AF_INET6 else f"ipv4:{ip}:{port}"
        if address not in found:
            found.append(address)
    return found


class ReplicatedClient:
    """gpucompute.Client's methods over every replica behind `target` (blocking).

    refresh_interval: seconds after which the next call re-resolves `target` and asks
    each address for its instance id (a call also refreshes at once when a replica is
    UNAVAILABLE or a buffer's owner is unknown). probe_timeout: seconds one address has
    to answer that. Other keyword arguments go to each address's gpucompute.Client.
    DeviceArrays it returns belong to their replica's Client.
    """

    def __init__(self, target: Optional[str] = None, *, refresh_interval: float = 30.0,
                 probe_timeout: float = 2.0, **client_options: Any):
        self.target = resolve_target(target)
        self.refresh_interval = refresh_interval
        self.probe_timeout = probe_timeout
        self._client_options = client_options
        self._lock = threading.Lock()
        self._clients: Dict[str, Client] = {}     # address -> its Client
        self._live: Dict[str, str] = {}           # instance id -> address
        self._refreshed_at = 0.0
        self._turn = itertools.count()
        self.refresh()

    def __repr__(self) -> str:
        return f"gpucompute.ReplicatedClient({self.target!r})"

    def __enter__(self) -> "ReplicatedClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
            self._live.clear()

    # -- membership -------------------------------------------------------------------

    def refresh(self) -> Dict[str, str]:
        """Re-resolves the target and asks every address for its instance id; returns
        {instance id: address} of the replicas that answered."""
        try:
            addresses = resolve(self.target)
        except OSError as e:  # a failed look-up keeps the addresses known: they may be up
            with self._lock:
                addresses = list(self._clients)
            if not addresses:
                raise Unavailable(Unavailable.default_code,
                                  f"cannot resolve {self.target!r}: {e}") from e
        with self._lock:
            for gone in set(self._clients) - set(addresses):
                self._clients.pop(gone).close()
            for address in addresses:
                if address not in self._clients:
                    self._clients[address] = Client(address, **self._client_options)
            clients = dict(self._clients)
        live: Dict[str, str] = {}
        for address, client in clients.items():
            try:
                live[client.info(timeout=self.probe_timeout).instance_id] = address
            except GpuComputeError:
                continue  # not serving now: no calls go there until a refresh finds it
        with self._lock:
            self._live = live
            self._refreshed_at = time.monotonic()
        return dict(live)

    def replicas(self) -> Dict[str, str]:
        """{instance id: address} as last seen."""
        with self._lock:
            return dict(self._live)

    def _current(self) -> List[Tuple[str, Client]]:
        with self._lock:
            fresh = time.monotonic() - self._refreshed_at < self.refresh_interval
            live = [(i, self._clients[a]) for i, a in self._live.items()]
        if fresh and live:
            return live
        self.refresh()
        with self._lock:
            return [(i, self._clients[a]) for i, a in self._live.items()]

    # -- routing ----------------------------------------------------------------------

    def _any(self, call: str, fn: Callable[[Client], Any]) -> Any:
        """`fn` on the next replica in turn; on UNAVAILABLE, on the next one that has
        not failed it, until every replica has."""
        failed: Set[str] = set()
        while True:
            choices = [(i, c) for i, c in self._current() if i not in failed]
            if not choices:
                raise Unavailable(
                    Unavailable.default_code,
                    f"no replica of {self.target!r} answered"
                    + (f" ({len(failed)} failed this call)" if failed else ""), call=call)
            instance, client = choices[next(self._turn) % len(choices)]
            try:
                return fn(client)
            except Unavailable:
                failed.add(instance)
                self.refresh()

    def _owner(self, call: str, buffer_ids: Iterable[str], fn: Callable[[Client], Any]) -> Any:
        """`fn` on the replica that stores every buffer named; FailedPrecondition when
        they are on two replicas, DataLoss when their replica is gone."""
        owners: Dict[str, str] = {}
        for buffer_id in buffer_ids:
            owners.setdefault(issuing_instance(buffer_id), buffer_id)
        if len(owners) > 1:
            where = ", ".join(f"{b} on instance {i or '(none: not a buffer id)'}"
                              for i, b in owners.items())
            raise FailedPrecondition(
                FailedPrecondition.default_code,
                f"the request's buffers are stored on {len(owners)} replicas ({where}); "
                "stored operands of one request must share a replica, and nothing is copied "
                "between replicas: download and upload them to one", call=call)
        (owner, buffer_id), = owners.items()
        if not owner:  # not a buffer id: any replica answers NOT_FOUND
            return self._any(call, fn)
        client = dict(self._current()).get(owner)
        if client is None:  # a replica started since the last refresh, or a lost buffer
            self.refresh()
            client = dict(self._current()).get(owner)
        if client is None:
            raise self._lost(call, owner, buffer_id)
        try:
            return fn(client)
        except (Unavailable, FailedPrecondition) as e:
            # A dead replica, or another one now at its address (a restart): is it gone?
            if ((isinstance(e, FailedPrecondition) and e.reason != "BUFFER_ON_OTHER_REPLICA")
                    or owner in self.refresh()):
                raise
            raise self._lost(call, owner, buffer_id) from e

    def _lost(self, call: str, owner: str, buffer_id: str) -> DataLoss:
        return DataLoss(
            DataLoss.default_code,
            f"buffer {buffer_id} was stored by replica instance {owner}, which none of the "
            f"{len(self.replicas())} replicas of {self.target!r} is any more: it stopped or "
            "restarted and its buffers are lost; upload the data again", call=call)

    # -- the Client's methods -----------------------------------------------------------

    def health(self, service: str = "", **kwargs: Any) -> str:
        return str(self._any("health", lambda c: c.health(service, **kwargs)))

    def info(self, **kwargs: Any) -> ServerInfo:
        info: ServerInfo = self._any("info", lambda c: c.info(**kwargs))
        return info

    def upload(self, array: Any, name: str = "", **kwargs: Any) -> DeviceArray:
        stored: DeviceArray = self._any("upload", lambda c: c.upload(array, name, **kwargs))
        return stored

    def download(self, buffer: Any, **kwargs: Any) -> Any:
        return self._owner("download", [_id(buffer)],
                           lambda c: c.download(_id(buffer), **kwargs))

    def delete(self, buffer: Any, **kwargs: Any) -> int:
        if isinstance(buffer, DeviceArray) and buffer.deleted:
            return 0
        freed = int(self._owner("delete", [_id(buffer)],
                                lambda c: c.delete(_id(buffer), **kwargs)))
        if isinstance(buffer, DeviceArray):
            buffer._deleted = True
        return freed

    def list_buffers(self, **kwargs: Any) -> BufferList:
        """The caller's buffers on every live replica, with their bytes and quotas summed."""
        out = BufferList()
        out.used_bytes = out.quota_bytes = 0
        for _, client in self._current():
            part: BufferList = client.list_buffers(**kwargs)
            out.extend(part)
            out.used_bytes += part.used_bytes
            out.quota_bytes += part.quota_bytes
        return out

    def _compute(self, method: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        named = [v.id for v in (*args, *kwargs.values()) if isinstance(v, DeviceArray)]
        run: Callable[[Client], Any] = lambda c: getattr(c, method)(*args, **kwargs)
        return self._owner(method, named, run) if named else self._any(method, run)


def _id(buffer: Any) -> str:
    return buffer.id if isinstance(buffer, DeviceArray) else str(buffer)


def _compute_method(method: str) -> Callable[..., Any]:
    def call(self: ReplicatedClient, *args: Any, **kwargs: Any) -> Any:
        return self._compute(method, args, kwargs)
    call.__name__ = method
    call.__doc__ = getattr(Client, method).__doc__
    return call


for _method in _COMPUTE_METHODS:
    setattr(ReplicatedClient, _method, _compute_method(_method))
