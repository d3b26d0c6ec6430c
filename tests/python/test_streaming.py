"""StreamingCompute in the Python client (inputs larger than the GPU): byte for
byte the unary operations' results from arrays, memory-mapped files and iterators of
chunks, in both clients; bad chunks refused naming the limit."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import gpucompute

DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_stream_discount_product_matches_discount_product(client, rng, dtype):
    factors = rng.uniform(0.5, 1.0, (24, 7)).astype(dtype)
    values = rng.uniform(-100, 100, (503, 24, 7)).astype(dtype)
    streamed, timing = client.stream_discount_product(factors, values, input_chunk_bytes=32 << 10,
                                                      return_timing=True)
    expected = client.discount_product(factors, values)
    assert streamed.tobytes() == expected.tobytes()
    assert timing.compute >= 0 and timing.wall > 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_stream_haversine_points_matches_haversine_points(client, rng, dtype):
    lat = rng.uniform(-90, 90, (4001, 2)).astype(dtype)
    lon = rng.uniform(-180, 180, (4001, 2)).astype(dtype)
    refs = [(10.0, 20.0), (-33.9, 151.2), (51.5, -0.1)]
    streamed = client.stream_haversine_points(lat, lon, refs, input_chunk_bytes=16 << 10,
                                              chunk_bytes=8192)
    expected = client.haversine_points(lat, lon, refs)
    assert streamed.shape == (3, 4001, 2)
    assert streamed.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_stream_normalize_matches_normalize(client, rng, dtype):
    a = rng.uniform(0.1, 10, (9, 211, 33)).astype(dtype)
    for norm in ("sum", "l2", "max_abs"):
        streamed = client.stream_normalize(a, norm=norm, input_chunk_bytes=20 << 10)
        assert streamed.tobytes() == client.normalize(a, norm=norm).tobytes()


def test_stream_from_memmap_into_memmap(client, rng, tmp_path):
    values = np.lib.format.open_memmap(tmp_path / "values.npy", mode="w+", dtype=np.float32,
                                       shape=(4096, 256))
    values[:] = rng.uniform(-1, 1, values.shape)
    factors = rng.uniform(0.5, 1, (256,)).astype(np.float32)
    out = np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=np.float32,
                                    shape=values.shape)
    assert client.stream_discount_product(factors, values, out=out) is out
    out.flush()
    assert np.array_equal(np.load(tmp_path / "out.npy"), factors * np.asarray(values))


def test_stream_from_an_iterator_of_chunks(client, rng):
    a = rng.uniform(0.1, 10, (1000, 64))
    chunks = (a[i:i + 137] for i in range(0, 1000, 137))
    streamed = client.stream_normalize(chunks, shape=a.shape, norm="l1")
    assert streamed.tobytes() == client.normalize(a, norm="l1").tobytes()
    lat = rng.uniform(-90, 90, 700)
    lon = rng.uniform(-180, 180, 700)
    pairs = ((lat[i:i + 100], lon[i:i + 100]) for i in range(0, 700, 100))
    points = client.stream_haversine_points(pairs, None, (0.0, 0.0), shape=(700,))
    assert points.tobytes() == client.haversine_points(lat, lon, (0.0, 0.0)).tobytes()


def test_stream_with_the_aio_client(server, rng):
    a = rng.uniform(0.1, 10, (300, 50)).astype(np.float32)

    async def run():
        async with gpucompute.aio.Client(server.client().target) as c:
            return await c.stream_normalize(a, input_chunk_bytes=4096)

    with server.client() as c:
        assert asyncio.run(run()).tobytes() == c.normalize(a).tobytes()


def test_stream_chunks_that_break_rows_are_refused(client):
    a = np.ones((10, 50))
    chunks = iter([a.reshape(-1)[:75], a.reshape(-1)[75:]])  # 1.5 rows, then the rest
    with pytest.raises(gpucompute.InvalidArgument) as e:
        client.stream_normalize(chunks, shape=a.shape)
    assert "a chunk must hold whole rows: a positive multiple of 400 bytes" in str(e.value)
    with pytest.raises(gpucompute.InvalidArgument) as e:
        client.stream_normalize(iter([a[:4]]), shape=a.shape)
    assert "stream ended after 4 of the 10 rows" in str(e.value)


def test_stream_discount_product_with_rows_larger_than_a_chunk(client, rng):
    """Seed 000's layout: factors (M, O) whose period (4 MB here) is larger than a chunk,
    as a stored buffer (too large for a header)."""
    factors = rng.uniform(0.5, 1.0, (100_000, 5))
    values = rng.uniform(-1, 1, (3, 100_000, 5))
    with client.upload(factors, name="factors") as f_dev:
        streamed = client.stream_discount_product(f_dev, values, input_chunk_bytes=300_000)
    assert streamed.tobytes() == (factors * values).tobytes()
