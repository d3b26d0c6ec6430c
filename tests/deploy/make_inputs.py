#!/usr/bin/python3
"""Writes the small .npy inputs dashboard_test.sh sends (standard library only).

    make_inputs.py DIR
"""
import math
import pathlib
import struct
import sys


def write_npy(path, shape, values, dtype="<f8"):
    """NPY format 1.0, C order."""
    count = 1
    for n in shape:
        count *= n
    assert len(values) == count, (path, len(values), count)
    shape_txt = "(" + "".join(f"{n}," for n in shape) + ")" if len(shape) == 1 else \
        "(" + ", ".join(str(n) for n in shape) + ")"
    header = f"{{'descr': '{dtype}', 'fortran_order': False, 'shape': {shape_txt}, }}"
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    fmt = {"<f8": "d", "<f4": "f"}[dtype]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{count}{fmt}", *values))


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    # normalize: 4 rows of 8 positive values; a second input whose row 1 is all zeros.
    write_npy(out / "rows.npy", (4, 8), [1.0 + i for i in range(32)])
    write_npy(out / "zero_row.npy", (2, 4), [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0])
    # discount-product: factors (M, O) = (3, 4), values (D, M, O) = (2, 3, 4).
    write_npy(out / "factors.npy", (3, 4), [0.9 ** i for i in range(12)])
    write_npy(out / "values.npy", (2, 3, 4), [float(i) for i in range(24)])
    # lombscargle: 64 uneven samples of a sine.
    x = [0.37 * i + 0.05 * math.sin(i) for i in range(64)]
    write_npy(out / "x.npy", (64,), x)
    write_npy(out / "y.npy", (64,), [math.sin(1.3 * t) for t in x])
    # haversine points: 6 points.
    write_npy(out / "lat.npy", (6,), [-50.0, -20.0, 0.0, 10.0, 45.0, 80.0])
    write_npy(out / "lon.npy", (6,), [0.0, 30.0, 60.0, 90.0, 120.0, 150.0])
    # 1 MiB (256 x 512 float64): host <-> device copies of a size that shows in the
    # transfer byte and second counters.
    write_npy(out / "rows_1mib.npy", (256, 512), [1.0 + (i % 97) for i in range(256 * 512)])
    # 128 KiB: larger than the test server's buffer quota.
    write_npy(out / "big.npy", (16384,), [0.5] * 16384)


if __name__ == "__main__":
    main()
