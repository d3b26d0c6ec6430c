"""Three replicas behind one target (127.0.0.2, .3 and .4 on loopback), through
gpucompute.ReplicatedClient: buffers reach their owner, stateless calls spread, a foreign
id names its owner, and a replica killed mid-run loses only its own buffers, each call
naming one failing with DataLoss."""
from __future__ import annotations

import concurrent.futures
import signal
import threading
from collections import Counter
from typing import Dict, List, Tuple

import numpy as np
import pytest

import gpucompute
from gpucompute.replicas import issuing_instance, resolve
from conftest import ServerProcess

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


class Replicas:
    def __init__(self) -> None:
        self.servers = [ServerProcess(f"--address={host}:0") for host in HOSTS]
        self.addresses = [f"{h}:{s.port}" for h, s in zip(HOSTS, self.servers)]
        self.target = "ipv4:" + ",".join(self.addresses)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


@pytest.fixture(scope="module")
def replicas():
    r = Replicas()
    yield r
    r.stop()


@pytest.fixture
def fresh_replicas():
    r = Replicas()
    yield r
    r.stop()


def test_resolve_splits_address_lists_and_looks_up_names():
    assert resolve("ipv4:127.0.0.2:1,127.0.0.3:2") == ["ipv4:127.0.0.2:1", "ipv4:127.0.0.3:2"]
    assert resolve("dns:///localhost:50051")[0] in ("ipv4:127.0.0.1:50051", "ipv6:[::1]:50051")
    assert "ipv4:127.0.0.1:7" in resolve("localhost:7") + resolve("127.0.0.1:7")
    with pytest.raises(ValueError, match="no port"):
        resolve("localhost")
    with pytest.raises(gpucompute.Unavailable, match="cannot resolve"):
        gpucompute.ReplicatedClient("no-such-host.invalid:50051")


def test_each_replica_has_its_own_instance_and_buffer_ids_carry_it(replicas):
    with gpucompute.ReplicatedClient(replicas.target, timeout=30) as rc:
        seen = rc.replicas()
        assert sorted(seen.values()) == sorted("ipv4:" + a for a in replicas.addresses)
        assert len(seen) == 3 and all(len(i) == 8 for i in seen)
        handles = [rc.upload(np.arange(4.0), "spread") for _ in range(6)]
        # Round-robin: uploads land on every replica, each id naming the one it is on.
        assert Counter(issuing_instance(h.id) for h in handles) == {i: 2 for i in seen}
        for h in handles:
            assert rc.delete(h) == 32


def test_a_foreign_id_names_its_owner_and_is_not_looked_up(replicas):
    with gpucompute.ReplicatedClient(replicas.target, timeout=30) as rc:
        handle = rc.upload(np.ones(3), "owned")
        owner = issuing_instance(handle.id)
        other = next(a for i, a in rc.replicas().items() if i != owner)
        with gpucompute.Client(other, timeout=30) as direct:
            for call in (lambda: direct.download(handle.id), lambda: direct.delete(handle.id),
                         lambda: direct.normalize(handle)):
                with pytest.raises(gpucompute.FailedPrecondition) as e:
                    call()
                assert f"was stored by replica instance {owner}, not by this one" in str(e.value)
        np.testing.assert_array_equal(rc.download(handle), np.ones(3))  # still there
        rc.delete(handle)


def test_operands_on_two_replicas_fail_clearly(replicas):
    with gpucompute.ReplicatedClient(replicas.target, timeout=30) as rc:
        a, b = rc.upload(np.ones((2, 3))), rc.upload(np.ones((2, 3)))
        assert issuing_instance(a.id) != issuing_instance(b.id)  # consecutive turns
        with pytest.raises(gpucompute.FailedPrecondition, match="stored on 2 replicas"):
            rc.discount_product(a, b)
        rc.delete(a), rc.delete(b)


def _mixed_call(rc: gpucompute.ReplicatedClient, rng: np.random.Generator, step: int,
                kept: List[Tuple[gpucompute.DeviceArray, np.ndarray]]) -> str:
    """One call of a mix of stateless and buffer calls, its result checked; its kind."""
    kind = ("upload", "download", "normalize", "discount", "discount_kept")[step % 5]
    if kind == "upload" or not kept:
        a = rng.random((3, 5))
        kept.append((rc.upload(a, f"mix {step}"), a))
        return "upload"
    handle, a = kept[int(rng.integers(len(kept)))]
    if kind == "download":
        np.testing.assert_array_equal(rc.download(handle), a)
    elif kind == "normalize":  # on the buffer's replica
        np.testing.assert_allclose(rc.normalize(handle), a / a.sum(-1, keepdims=True),
                                   rtol=1e-14)
    elif kind == "discount":  # stateless: any replica
        f = rng.random(5)
        np.testing.assert_array_equal(rc.discount_product(f, a), f * a)
    else:  # a result kept where its operand is, then read back
        f = rng.random(5)
        kept_result = rc.discount_product(f, handle, keep_on_device=True)
        assert issuing_instance(kept_result.id) == issuing_instance(handle.id)
        np.testing.assert_array_equal(rc.download(kept_result), f * a)
        rc.delete(kept_result)
    return kind


def test_thousand_mixed_calls_through_one_target(replicas, rng):
    calls, workers = 1000, 4
    errors: List[BaseException] = []
    kinds: Counter = Counter()
    lock = threading.Lock()
    with gpucompute.ReplicatedClient(replicas.target, timeout=30) as rc:
        def worker(seed: int) -> None:
            own_rng, kept = np.random.default_rng(seed), []
            for step in range(calls // workers):
                try:
                    kind = _mixed_call(rc, own_rng, step, kept)
                except BaseException as e:  # collected: every call is counted
                    with lock:
                        errors.append(e)
                    continue
                with lock:
                    kinds[kind] += 1
            for handle, _ in kept:
                rc.delete(handle)
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(worker, rng.integers(1 << 31, size=workers)))
        assert errors == []
        assert sum(kinds.values()) == calls
        assert len(rc.list_buffers()) == 0


def test_a_replica_killed_mid_run_loses_only_its_buffers(fresh_replicas, rng):
    rc = gpucompute.ReplicatedClient(fresh_replicas.target, timeout=30)
    instance_of: Dict[str, ServerProcess] = {
        i: fresh_replicas.servers[fresh_replicas.addresses.index(a[len("ipv4:"):])]
        for i, a in rc.replicas().items()}
    victim = next(iter(instance_of))
    failures: List[Tuple[str, BaseException]] = []
    done: Counter = Counter()
    lock = threading.Lock()
    killed = threading.Event()

    def worker(seed: int) -> None:
        own_rng = np.random.default_rng(seed)
        kept: List[Tuple[gpucompute.DeviceArray, np.ndarray]] = []
        for step in range(150):
            if step == 50 and seed == seeds[0]:
                instance_of[victim].proc.send_signal(signal.SIGKILL)
                instance_of[victim].proc.wait()
                killed.set()
            try:
                _mixed_call(rc, own_rng, step, kept)
            except gpucompute.GpuComputeError as e:
                with lock:
                    failures.append((step, e))
                continue
            with lock:
                done["after" if killed.is_set() else "before"] += 1

    seeds = [int(s) for s in rng.integers(1 << 31, size=3)]
    with concurrent.futures.ThreadPoolExecutor(len(seeds)) as pool:
        list(pool.map(worker, seeds))
    try:
        assert killed.is_set() and victim not in rc.replicas() and len(rc.replicas()) == 2
        # Only calls naming the victim's buffers failed, each with DataLoss naming it.
        print(f"{len(failures)} calls failed after the kill, {done['after']} succeeded")
        assert failures
        for _, e in failures:
            assert isinstance(e, gpucompute.DataLoss), repr(e)
            assert f"replica instance {victim}, which none of the 2 replicas" in e.message
            assert issuing_instance(e.message.split()[1]) == victim
        assert done["after"] > 200  # the survivors carried on: stateless calls never failed
        survivors = rc.list_buffers()
        assert {issuing_instance(b.id) for b in survivors} <= set(rc.replicas())
        for b in survivors:
            rc.delete(b)
    finally:
        rc.close()


def test_a_restarted_replica_does_not_take_its_predecessors_buffers(fresh_replicas):
    with gpucompute.ReplicatedClient(fresh_replicas.target, timeout=30) as rc:
        handles = [rc.upload(np.full(4, float(i)), f"before {i}") for i in range(3)]
        old = fresh_replicas.servers[0]
        old_instance = next(i for i, a in rc.replicas().items()
                            if a == "ipv4:" + fresh_replicas.addresses[0])
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait()
        # The same address, a new process: a new instance id.
        fresh_replicas.servers[0] = ServerProcess(f"--address={fresh_replicas.addresses[0]}")
        for i, h in enumerate(handles):
            if issuing_instance(h.id) == old_instance:
                with pytest.raises(gpucompute.DataLoss, match=f"replica instance {old_instance}"):
                    rc.download(h)
            else:
                np.testing.assert_array_equal(rc.download(h), np.full(4, float(i)))
        assert old_instance not in rc.replicas() and len(rc.replicas()) == 3
        assert len({issuing_instance(rc.upload(np.ones(2)).id) for _ in range(3)}) == 3
