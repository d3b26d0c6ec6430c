"""gpucompute.aio.Client: the blocking client's methods, awaitable, on grpc.aio."""
import asyncio
import inspect

import numpy as np
import pytest

import gpucompute as gc
import gpucompute.aio
import reference as ref


def run(coro):
    return asyncio.run(coro)


def test_same_methods_and_signatures():
    names = [n for n in dir(gc.Client) if not n.startswith("_") and n != "close"
             and callable(getattr(gc.Client, n))]
    assert {"normalize", "lombscargle", "haversine_grid", "upload", "download"} <= set(names)
    for name in names:
        assert (inspect.signature(getattr(gc.aio.Client, name))
                == inspect.signature(getattr(gc.Client, name))), name


def test_every_method(server, rng):
    a = rng.uniform(1, 2, (3, 50))
    x = np.sort(rng.uniform(0, 10, 60))
    y = np.cos(1.3 * x)
    freqs = np.linspace(0.1, 4, 20)

    async def main():
        async with gc.aio.Client(server.target, timeout=60) as client:
            assert await client.health() == "SERVING"
            assert (await client.info()).backend == "cpu"
            np.testing.assert_allclose(await client.normalize(a, norm="l2"),
                                       ref.normalize(a, "l2"), rtol=1e-12)
            np.testing.assert_array_equal(await client.discount_product(a[0], a), a[0] * a)
            grid = await client.haversine_grid(gc.LatLonMesh(0, 1, 3, 0, 1, 4), (0, 0))
            assert grid.shape == (1, 3, 4)
            points = await client.haversine_points(a[0], a[1], (0, 0))
            assert points.shape == (1, 50)
            out = np.empty(20)
            got, timing = await client.lombscargle(x, y, freqs, normalize=True, out=out,
                                                   return_timing=True)
            assert got is out and timing.backend == "cpu"
            np.testing.assert_allclose(out, ref.scipy_classic(x, y, freqs, False, True),
                                       rtol=1e-9)
            async with await client.upload(a, name="aio") as dev:
                assert dev.id in [b.id for b in await client.list_buffers()]
                np.testing.assert_array_equal(await dev.download(), a)
                with pytest.raises(TypeError, match="await"):
                    np.asarray(dev)  # no blocking download inside the event loop
                kept = await client.normalize(dev, keep_on_device=True)
                assert isinstance(kept, gc.DeviceArray)
                assert await kept.delete() == a.nbytes and kept.deleted
            assert dev.deleted
            assert dev.id not in [b.id for b in await client.list_buffers()]

    run(main())


def test_concurrent_calls_and_auto_upload(server, rng):
    arrays = [rng.uniform(1, 2, 5000) for _ in range(8)]

    async def main():
        async with gc.aio.Client(server.target, upload_threshold=1024) as client:
            results = await asyncio.gather(*(client.normalize(a) for a in arrays))
            assert len(await client.list_buffers()) == 0  # temporaries deleted
            return results

    for a, r in zip(arrays, run(main())):
        np.testing.assert_allclose(r, a / a.sum(), rtol=1e-12)


def test_errors_name_the_call(server):
    async def main():
        async with gc.aio.Client(server.target) as client:
            with pytest.raises(gc.InvalidArgument) as e:
                await client.normalize(np.array([[1.0, 2.0], [0.0, 0.0]]))
            assert str(e.value).startswith("normalize: INVALID_ARGUMENT: ")
            with pytest.raises(gc.DeadlineExceeded) as e:
                x = np.linspace(0, 10, 4096)
                await client.lombscargle(x, np.cos(x), gc.FrequencyGrid(0.1, 10, 1 << 20),
                                         timeout=0.001)
            assert e.value.call == "lombscargle"
            with pytest.raises(ValueError, match="out has shape"):
                await client.normalize(np.ones(3), out=np.empty(4))

    run(main())
