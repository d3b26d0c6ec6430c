"""NumPy references the client's results are checked against."""
import numpy as np


def haversine(lat, lon, refs, radius=6371.0088):
    """(n_ref, *shape) great-circle distances, float64, as 2 R arcsin(sqrt(h))."""
    lat = np.radians(np.asarray(lat, np.float64))
    lon = np.radians(np.asarray(lon, np.float64))
    out = []
    for ref_lat, ref_lon in np.atleast_2d(refs):
        rl, ro = np.radians(ref_lat), np.radians(ref_lon)
        h = np.sin((lat - rl) / 2) ** 2 + np.cos(lat) * np.cos(rl) * np.sin((lon - ro) / 2) ** 2
        out.append(2 * radius * np.arcsin(np.sqrt(np.clip(h, 0, 1))))
    return np.stack(out)


def normalize(a, norm="sum"):
    a = np.asarray(a, np.float64)
    if norm == "sum":
        d = a.sum(axis=-1, keepdims=True)
    elif norm == "l1":
        d = np.abs(a).sum(axis=-1, keepdims=True)
    elif norm == "l2":
        d = np.sqrt((a * a).sum(axis=-1, keepdims=True))
    elif norm == "max_abs":
        d = np.abs(a).max(axis=-1, keepdims=True)
    else:
        raise ValueError(norm)
    return a / d


def lombscargle_1_15(x, y, freqs, precenter=False, normalize=False, weights=None,
                     floating_mean=False):
    """scipy.signal.lombscargle as of SciPy 1.15 (weights, floating_mean), in float64,
    written out from the SciPy 1.15 formulation (phase offset tau that removes CS):
    Eq. numbers of Zechmeister & Kuerster (2009). Rows of a (B, N) y one by one.
    normalize: False, True or "amplitude" (complex)."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    freqs = np.asarray(freqs, np.float64)
    if y.ndim == 2:
        xs = np.broadcast_to(x, y.shape)
        ws = None if weights is None else np.broadcast_to(np.asarray(weights), y.shape)
        return np.stack([
            lombscargle_1_15(xs[i], y[i], freqs, precenter, normalize,
                             None if ws is None else ws[i], floating_mean)
            for i in range(y.shape[0])])
    w = np.ones_like(y) if weights is None else np.array(weights, np.float64)
    w = w / w.sum()
    if precenter:
        y = y - y.mean()
    wc = w[:, None]
    yc = y[:, None]
    wy = wc * yc
    ft = freqs[None, :] * x[:, None]
    cos, sin = np.cos(ft), np.sin(ft)

    Y = float(np.sum(w * y))                      # Eq. 7
    CC = np.sum(wc * cos * cos, axis=0)           # Eq. 13
    SS = 1.0 - CC                                 # Eq. 14
    CS = np.sum(wc * cos * sin, axis=0)           # Eq. 15
    if floating_mean:
        C = np.sum(wc * cos, axis=0)              # Eq. 8
        S = np.sum(wc * sin, axis=0)              # Eq. 9
        CC = CC - C * C
        SS = SS - S * S
        CS = CS - C * S
    tau = 0.5 * np.arctan2(2.0 * CS, CC - SS)     # Eq. 19
    ftt = ft - tau[None, :]
    ct, st = np.cos(ftt), np.sin(ftt)
    YC = np.sum(wy * ct, axis=0)                  # Eq. 11
    YS = np.sum(wy * st, axis=0)                  # Eq. 12
    CC = np.sum(wc * ct * ct, axis=0)
    SS = 1.0 - CC
    if floating_mean:
        C = np.sum(wc * ct, axis=0)
        S = np.sum(wc * st, axis=0)
        YC = YC - Y * C
        YS = YS - Y * S
        CC = CC - C * C
        SS = SS - S * S
    eps = np.finfo(np.float64).epsneg
    CC = np.maximum(CC, eps)
    SS = np.maximum(SS, eps)
    a = YC / CC
    b = YS / SS
    if normalize == "amplitude":                  # the fit's amplitude and phase
        return (a + 1j * b) * np.exp(1j * tau)
    p = 2.0 * (a * YC + b * YS)
    if normalize:
        YY = float(np.sum(w * y * y))             # Eq. 10
        if floating_mean:
            YY -= Y * Y
        return p * 0.5 / YY                       # Eq. 20
    return p * len(x) / 4.0


def scipy_classic(x, y, freqs, precenter, normalize):
    """scipy.signal.lombscargle of the installed SciPy on float64 inputs, with SciPy
    1.15's meaning of precenter: y - y.mean() goes in, so normalize divides by the
    centered y.y (SciPy < 1.15 divided a precentered periodogram by the uncentered y.y;
    SciPy >= 1.17 deprecates the precenter argument for exactly this substitution)."""
    from scipy import signal
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    if precenter:
        y = y - y.mean()
    return signal.lombscargle(x, y, np.asarray(freqs, np.float64), normalize=normalize)
