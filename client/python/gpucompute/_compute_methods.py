"""The compute methods of ClientApi (both clients): each checks and casts its operands,
says how to build its request, and runs it through ClientApi._run / _compute."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._operands import (NORMS, ArrayLike, Operand, as_array, cast_operands, haversine_request,
                        result_dtype, set_operand)
from ._pb import pb
from ._steps import Steps
from ._stream import ResultOptions
from ._types import DEFAULT_RADIUS_KM, PB_TO_NP, Array, FrequencyGrid, LatLonMesh

Named = List[Tuple[str, Operand]]
Placed = Dict[str, Operand]

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
    xs = [np.asarray(v) for v in x]
    if any(a.ndim != 1 or b.shape != a.shape for a, b in zip(xs, ys)):
        raise ValueError("each series of a ragged batch needs 1-D x and y of one length")
    offsets = [0] + [int(v) for v in np.cumsum([len(v) for v in ys])]
    flat_w = None if weights is None else np.concatenate([np.asarray(w) for w in weights])
    return np.concatenate(xs), np.concatenate(ys), flat_w, offsets


def _is_ragged(y: Any) -> bool:
    """y as series of different lengths (a list of 1-D arrays); a list of numbers is a
    1-D array and a list of equal-length rows a 2-D batch, as NumPy reads them."""
    if not isinstance(y, (list, tuple)) or not y or any(np.ndim(v) != 1 for v in y):
        return False
    return len({len(v) for v in y}) > 1


def _moved_axis(operand: Operand, axis: int, keep_on_device: bool) -> Optional[int]:
    """normalize's ``axis`` as a non-negative index when it is not the last; None when it is."""
    ndim = len(operand.shape)
    index = int(axis)
    if not -max(ndim, 1) <= index < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of bounds for an array of {ndim} dimension(s)")
    index %= max(ndim, 1)
    if index >= ndim - 1:
        return None
    if not isinstance(operand, np.ndarray) or keep_on_device:
        raise ValueError(f"axis={axis} (not the last) takes a NumPy input and a result that "
                         "comes back: move the axis last yourself for a DeviceArray, a "
                         "device array or keep_on_device")
    return index


def _axis_back(result: Any, axis: int, out: Optional[Array]) -> Any:
    """normalize's result (or (result, Timing)) with its last axis moved back to ``axis``,
    copied into ``out`` when given."""
    value, timing = result if isinstance(result, tuple) else (result, None)
    value = np.moveaxis(value, -1, axis)
    if out is not None:
        if out.shape != value.shape:
            raise ValueError(f"out has shape {out.shape}; the result has shape {value.shape}")
        np.copyto(out, value)
        value = out
    return value if timing is None else (value, timing)


def _broadcast_shape(*shapes: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    """NumPy's broadcast of the shapes; None where they do not broadcast (the server
    says why)."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _then(steps: Steps[Any], finish: Callable[[Any], Any]) -> Steps[Any]:
    """The steps, their result passed through ``finish``."""
    return finish((yield from steps))


def _legacy_scale(y: Operand, row_offsets: List[int], weights: Any, floating_mean: bool,
                  keep_on_device: bool) -> Array:
    """Per series, sum((y - mean)**2) / sum(y**2): SciPy 1.15's normalized power of a
    precentered series times this is SciPy 1.10's (which divides by the power of y as
    given), as a column to multiply the (..., M) result by."""
    if (not isinstance(y, np.ndarray) or weights is not None or floating_mean
            or keep_on_device):
        raise ValueError("legacy_normalize takes a NumPy y, no weights, no floating_mean "
                         "and a result that comes back (SciPy 1.10 had none of the others)")
    rows = ([y[b:e] for b, e in zip(row_offsets, row_offsets[1:])] if row_offsets
            else list(y.reshape(-1, y.shape[-1])))
    scale = np.array([np.sum((r - r.mean(dtype=np.float64)) ** 2, dtype=np.float64)
                      / np.sum(np.square(r, dtype=np.float64)) for r in rows])
    return scale.reshape(y.shape[:-1] + (1,)) if not row_offsets else scale[:, None]


def _scaled(result: Any, scale: Array) -> Any:
    """lombscargle's result (or (result, Timing)) multiplied by ``scale``, in place."""
    value = result[0] if isinstance(result, tuple) else result
    value *= scale.astype(value.dtype)
    return result


class ComputeMethods:
    """discount_product, haversine_grid, haversine_points, normalize and lombscargle."""

    if TYPE_CHECKING:
        def _call(self, name: str, timeout: Optional[float], steps: Steps[Any]) -> Any: ...

        def _compute(self, method: str, make_request: Callable[[Placed], Any], named: Named,
                     options: ResultOptions, result_shape: Optional[Tuple[int, ...]] = None,
                     result_type: Any = None) -> Steps[Any]: ...

        def _run(self, name: str, method: str, make_request: Callable[[Placed], Any],
                 named: Named, options: ResultOptions,
                 result_shape: Optional[Tuple[int, ...]] = None,
                 result_type: Any = None) -> Any: ...

    # Every compute method also takes, keyword-only: out= (write the result into this
    # C-contiguous NumPy array of its shape and dtype), keep_on_device=, chunk_bytes=,
    # return_timing=, buffer_name= and timeout= (see ResultOptions).

    def discount_product(self, factors: ArrayLike, values: ArrayLike, *,
                         dtype: Any = None, out: Optional[Array] = None,
                         keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                         return_timing: bool = False, buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None) -> Any:
        """factors * values with NumPy broadcasting (the seed: (M, O) * (D, M, O))."""
        named = cast_operands([("factors", as_array(factors, "factors")),
                      ("values", as_array(values, "values"))], dtype)

        def make(p: Placed) -> Any:
            req = pb.DiscountProductRequest()
            set_operand(req.factors, p["factors"])
            set_operand(req.values, p["values"])
            return req

        return self._run("discount_product", "DiscountProduct", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out),
            _broadcast_shape(named[0][1].shape, named[1][1].shape))

    def haversine_grid(self, mesh: LatLonMesh, refs: ArrayLike, *,
                       radius: float = DEFAULT_RADIUS_KM, dtype: Any = np.float64,
                       out: Optional[Array] = None, keep_on_device: bool = False,
                       chunk_bytes: Optional[int] = None, return_timing: bool = False,
                       buffer_name: Optional[str] = None,
                       timeout: Optional[float] = None) -> Any:
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
                                       buffer_name, timeout, out),
                         (len(request.references), int(mesh.n_lat), int(mesh.n_lon)),
                         PB_TO_NP[request.mesh.dtype])

    def haversine_points(self, lat: ArrayLike, lon: ArrayLike, refs: ArrayLike, *,
                         radius: float = DEFAULT_RADIUS_KM, dtype: Any = None,
                         out: Optional[Array] = None, keep_on_device: bool = False,
                         chunk_bytes: Optional[int] = None, return_timing: bool = False,
                         buffer_name: Optional[str] = None,
                         timeout: Optional[float] = None) -> Any:
        """Great-circle distances from each reference to each point (lat[i], lon[i]) of
        two equal-shape arrays S in degrees; shape (n_ref, *S), dtype of lat/lon."""
        request = haversine_request(refs, radius)
        named = cast_operands([("lat", as_array(lat, "lat")), ("lon", as_array(lon, "lon"))], dtype)

        def make(p: Placed) -> Any:
            set_operand(request.points.lat, p["lat"])
            set_operand(request.points.lon, p["lon"])
            return request

        return self._run("haversine_points", "HaversineGrid", make, named, ResultOptions(
            keep_on_device, chunk_bytes, return_timing, buffer_name, timeout, out),
            (len(request.references),) + tuple(named[0][1].shape))

    def normalize(self, a: ArrayLike, *, norm: str = "sum", axis: int = -1,
                  dtype: Any = None, out: Optional[Array] = None,
                  keep_on_device: bool = False, chunk_bytes: Optional[int] = None,
                  return_timing: bool = False, buffer_name: Optional[str] = None,
                  timeout: Optional[float] = None) -> Any:
        """Each row along ``axis`` (the last by default) divided by its norm: "sum" (x /
        sum x, the default), "l1", "l2" or "max_abs"; accumulated in float64 on the
        server. Another axis is moved last for the server and back in the result (a
        view), so it needs a NumPy array and a result that comes back."""
        key = str(norm).lower()
        if key not in NORMS:
            raise ValueError(f"norm is {norm!r}; use 'sum', 'l1', 'l2' or 'max_abs'")
        operand = as_array(a, "a")
        moved = _moved_axis(operand, axis, keep_on_device)
        if moved is not None:
            assert isinstance(operand, np.ndarray)  # _moved_axis says so
            operand = np.moveaxis(operand, moved, -1)  # made C-contiguous by cast_operands
        named = cast_operands([("input", operand)], dtype)

        def make(p: Placed) -> Any:
            req = pb.NormalizeRequest(norm=NORMS[key])
            set_operand(req.input, p["input"])
            return req

        options = ResultOptions(keep_on_device, chunk_bytes, return_timing, buffer_name,
                                timeout, None if moved is not None else out)
        steps = self._compute("Normalize", make, named, options, tuple(named[0][1].shape))
        if moved is not None:
            axis_back = moved
            steps = _then(steps, lambda result: _axis_back(result, axis_back, out))
        return self._call("normalize", timeout, steps)

    def lombscargle(self, x: ArrayLike, y: ArrayLike, freqs: Union[ArrayLike, FrequencyGrid],
                    *, precenter: bool = False, normalize: Union[bool, str] = False,
                    weights: Optional[ArrayLike] = None, floating_mean: bool = False,
                    method: str = "auto", accuracy: Optional[float] = None,
                    legacy_normalize: bool = False, dtype: Any = None,
                    out: Optional[Array] = None, keep_on_device: bool = False,
                    chunk_bytes: Optional[int] = None, return_timing: bool = False,
                    buffer_name: Optional[str] = None,
                    timeout: Optional[float] = None) -> Any:
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

        SciPy before 1.15 (Debian 12 ships 1.10) normalizes a precentered series by the
        power of y as given, not of y centered: with precenter=True and normalize=True
        its values differ from these by sum(y**2) / sum((y - y.mean())**2) per series
        (large for a y far from zero mean). legacy_normalize=True gives that older
        result (NumPy y, no weights, no floating_mean, a result that comes back).
        """
        if method not in _LOMB_SCARGLE_METHODS:
            raise ValueError(f"method is {method!r}; use one of {sorted(_LOMB_SCARGLE_METHODS)}")
        normalization = _normalization(normalize)
        row_offsets: List[int] = []
        if _is_ragged(y):
            x, y, weights, row_offsets = _ragged(x, y, weights)
        named: Named = [("y", as_array(y, "y")), ("x", as_array(x, "x"))]
        if weights is not None:
            named.append(("weights", as_array(weights, "weights")))
        if not isinstance(freqs, FrequencyGrid):
            named.append(("freqs", as_array(freqs, "freqs")))
        named = cast_operands(named, dtype)

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

        count = (int(freqs.count) if isinstance(freqs, FrequencyGrid)
                 else int(np.prod(dict(named)["freqs"].shape, dtype=np.int64)))
        y_shape = tuple(dict(named)["y"].shape)
        shape = None if normalization == "amplitude" or row_offsets else y_shape[:-1] + (count,)
        options = ResultOptions(keep_on_device, chunk_bytes, return_timing, buffer_name,
                                timeout, out, complex_pairs=normalization == "amplitude")
        steps = self._compute("LombScargle", make, named, options, shape)
        if legacy_normalize and precenter and normalization == "normalize":
            scale = _legacy_scale(dict(named)["y"], row_offsets, weights, floating_mean,
                                  keep_on_device)
            steps = _then(steps, lambda result: _scaled(result, scale))
        return self._call("lombscargle", timeout, steps)
