"""lombscargle's method choice (direct, NUFFT, auto) through the Python client:
each against the float64 SciPy 1.15 reference, the method reported in Timing, and
the requests the server refuses."""
import grpc
import numpy as np
import pytest

import gpucompute as gc
import reference as ref


def _series(rng, n=400, batch=None):
    x = np.sort(rng.uniform(0, 200, n))
    shape = (n,) if batch is None else (batch, n)
    y = 1.5 * np.sin(0.7 * x) + 0.3 + 0.5 * rng.standard_normal(shape)
    return x, y


def _close_on_row_scale(got, want, bound):
    """Each power within bound * (its row's largest power): the NUFFT's promise."""
    want = np.atleast_2d(want)
    scale = np.max(np.abs(want), axis=-1, keepdims=True)
    err = np.abs(np.atleast_2d(got) - want) / scale
    assert err.max() <= bound, f"worst error {err.max():.3g} of the row's largest power"


@pytest.mark.parametrize("method", ["direct", "nufft", "auto"])
@pytest.mark.parametrize("as_array", [False, True])
def test_methods_match_the_reference(client, rng, method, as_array):
    x, y = _series(rng, batch=2)
    w = rng.uniform(0.5, 2.0, y.shape)
    grid = gc.FrequencyGrid(0.05, 12.0, 4000)
    freqs = grid.numpy(np.float64) if as_array else grid
    out, timing = client.lombscargle(x, y, freqs, weights=w, floating_mean=True, normalize=True,
                                     method=method, return_timing=True)
    want = ref.lombscargle_1_15(x, y, grid.numpy(np.float64), normalize=True, weights=w,
                                floating_mean=True)
    _close_on_row_scale(out, want, 1e-9)
    if method != "auto":
        assert timing.method == method
    else:
        assert timing.method in ("direct", "nufft")
    assert timing.method in str(timing)


def test_accuracy_is_a_request_option(client, rng):
    x, y = _series(rng)
    grid = gc.FrequencyGrid(0.05, 12.0, 2000)
    want = ref.lombscargle_1_15(x, y, grid.numpy(np.float64))
    for accuracy in (1e-4, 1e-12):
        out = client.lombscargle(x, y, grid, method="nufft", accuracy=accuracy)
        _close_on_row_scale(out, want, accuracy)


def test_auto_picks_nufft_on_a_large_grid(client, rng):
    x, y = _series(rng, n=3000)
    _, timing = client.lombscargle(x, y, gc.FrequencyGrid(0.01, 20.0, 200000),
                                   return_timing=True)
    assert timing.method == "nufft"
    _, timing = client.lombscargle(x, y, rng.uniform(0.01, 20.0, 20000), return_timing=True)
    assert timing.method == "direct"


def test_refusals(client, rng):
    x, y = _series(rng, n=50)
    with pytest.raises(gc.GpuComputeError) as e:
        client.lombscargle(x, y, rng.uniform(0.1, 5, 100), method="nufft")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "evenly spaced" in e.value.message
    with pytest.raises(gc.GpuComputeError) as e:
        client.lombscargle(x, y, gc.FrequencyGrid(0.1, 5, 100), accuracy=1e-20)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "accuracy" in e.value.message
    with pytest.raises(ValueError):
        client.lombscargle(x, y, gc.FrequencyGrid(0.1, 5, 100), method="fast")


@pytest.mark.parametrize("method", ["direct", "nufft"])
def test_ragged_batch_matches_each_series_alone(client, rng, method):
    lengths = [50, 400, 23]
    xs = [np.sort(rng.uniform(0, 100, n)) for n in lengths]
    ys = [np.sin(1.1 * x) + 0.3 * rng.standard_normal(x.shape) for x in xs]
    ws = [rng.uniform(0.5, 2.0, x.shape) for x in xs]
    grid = gc.FrequencyGrid(0.05, 10.0, 500)
    out, timing = client.lombscargle(xs, ys, grid, weights=ws, precenter=True,
                                     floating_mean=True, method=method, return_timing=True)
    assert out.shape == (3, 500) and timing.method == method
    for row, x, y, w in zip(out, xs, ys, ws):
        want = ref.lombscargle_1_15(x, y, grid.numpy(np.float64), precenter=True, weights=w,
                                    floating_mean=True)
        _close_on_row_scale(row, want, 1e-9)


def test_ragged_batch_refusals(client, rng):
    with pytest.raises(ValueError):
        client.lombscargle([np.arange(3.0)], [np.arange(3.0), np.arange(2.0)],
                           gc.FrequencyGrid(0.1, 5, 10))
    with pytest.raises(gc.GpuComputeError) as e:
        client.lombscargle([np.arange(3.0), np.arange(0.0)], [np.arange(3.0), np.arange(0.0)],
                           gc.FrequencyGrid(0.1, 5, 10))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and "row_offsets" in e.value.message


def _scipy_amplitude(x, y, freqs, **options):
    """scipy.signal.lombscargle(normalize="amplitude") where the installed SciPy has it
    (before 1.15 normalize was a bool, "amplitude" a true one, and no weights)."""
    from scipy import signal
    probe = signal.lombscargle(np.arange(3.0), np.arange(3.0), np.ones(1), normalize="amplitude")
    if not np.iscomplexobj(probe):
        pytest.skip("the installed SciPy has no normalize='amplitude'")
    return signal.lombscargle(x, y, freqs, normalize="amplitude", **options)


def _close_amplitudes(got, want, bound):
    """Each amplitude within bound * (its row's largest |amplitude|)."""
    want = np.atleast_2d(want)
    err = np.abs(np.atleast_2d(got) - want) / np.max(np.abs(want), axis=-1, keepdims=True)
    assert err.max() <= bound, f"worst error {err.max():.3g} of the row's largest amplitude"


@pytest.mark.parametrize("method", ["direct", "nufft"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", [{}, {"floating_mean": True, "weights": True},
                                     {"precenter": True}])
def test_amplitude_matches_the_reference(client, rng, method, dtype, options):
    x, y = _series(rng, batch=2)
    options = dict(options)
    if options.pop("weights", False):
        options["weights"] = rng.uniform(0.5, 2.0, y.shape).astype(dtype)
    grid = gc.FrequencyGrid(0.05, 12.0, 3000)
    x, y = x.astype(dtype), y.astype(dtype)
    out = client.lombscargle(x, y, grid, normalize="amplitude", method=method, **options)
    assert out.shape == (2, 3000) and out.dtype == np.result_type(dtype, np.complex64)
    want = ref.lombscargle_1_15(x, y, grid.numpy(np.float64), normalize="amplitude", **options)
    _close_amplitudes(out, want, 1e-9 if dtype == np.float64 else 1e-5)


def test_amplitude_agrees_with_scipy(client, rng):
    x, y = _series(rng)
    w = rng.uniform(0.5, 2.0, y.shape)
    freqs = np.linspace(0.05, 12.0, 1500)
    want = _scipy_amplitude(x, y, freqs, weights=w, floating_mean=True)
    for method in ("direct", "nufft"):
        got = client.lombscargle(x, y, freqs, normalize="amplitude", weights=w,
                                 floating_mean=True, method=method)
        _close_amplitudes(got, want, 1e-9)


def test_amplitude_out_ragged_and_kept(client, rng):
    x, y = _series(rng, n=300)
    grid = gc.FrequencyGrid(0.05, 8.0, 700)
    want = ref.lombscargle_1_15(x, y, grid.numpy(np.float64), normalize="amplitude")
    out = np.full(700, np.nan, np.complex128)
    got = client.lombscargle(x, y, grid, normalize="amplitude", out=out)
    assert np.shares_memory(got, out)
    _close_amplitudes(out, want, 1e-9)
    # A peak at the sinusoid's frequency, 0.7: |A + iB| ~ 1.5.
    assert abs(np.abs(out[np.argmin(np.abs(grid.numpy(np.float64) - 0.7))]) - 1.5) < 0.2
    kept = client.lombscargle(x, y, grid, normalize="amplitude", keep_on_device=True)
    assert kept.shape == (700, 2)  # (real, imaginary) pairs as the server stores them
    np.testing.assert_array_equal(kept.download().view(np.complex128)[:, 0], out)
    kept.delete()
    xs, ys = [x[:120], x], [y[:120], y]
    rows = client.lombscargle(xs, ys, grid, normalize="amplitude", floating_mean=True)
    assert rows.shape == (2, 700)
    for row, xi, yi in zip(rows, xs, ys):
        _close_amplitudes(row, ref.lombscargle_1_15(xi, yi, grid.numpy(np.float64),
                                                    normalize="amplitude", floating_mean=True),
                          1e-9)


def test_normalize_values(client, rng):
    x, y = _series(rng, n=100)
    grid = gc.FrequencyGrid(0.1, 5, 50)
    np.testing.assert_array_equal(client.lombscargle(x, y, grid, normalize="normalize"),
                                  client.lombscargle(x, y, grid, normalize=True))
    np.testing.assert_array_equal(client.lombscargle(x, y, grid, normalize="power"),
                                  client.lombscargle(x, y, grid))
    with pytest.raises(ValueError, match="amplitude"):
        client.lombscargle(x, y, grid, normalize="psd")
