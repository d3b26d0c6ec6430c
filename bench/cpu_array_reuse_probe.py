#!/usr/bin/env python3
"""Server time of repeated DiscountProduct requests on fresh Python clients: whether
the server's arrays land in memory already mapped (bench/NOTES.md, the CPU backend's
freed arrays kept for reuse). Prints, per request, the server's queue, transfer-in,
compute and total milliseconds; three clients of six requests each.

    python3 bench/cpu_array_reuse_probe.py --target 127.0.0.1:50051 --rows 4000
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import gpucompute as gc  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True)
    p.add_argument("--rows", type=int, default=4000, help="factors (rows, 5), values (10, rows, 5) float32")
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--requests", type=int, default=6)
    args = p.parse_args()
    rng = np.random.default_rng(1)
    factors = rng.random((args.rows, 5)).astype(np.float32)
    values = rng.random((10, args.rows, 5)).astype(np.float32)
    for _ in range(args.clients):
        with gc.Client(args.target) as client:
            row = []
            for _ in range(args.requests):
                _, t = client.discount_product(factors, values, return_timing=True)
                row.append(f"q{t.queue * 1e3:.2f} in{t.transfer_in * 1e3:.2f} c{t.compute * 1e3:.2f} "
                           f"tot{t.total * 1e3:.2f}")
            print(" | ".join(row))


if __name__ == "__main__":
    main()
