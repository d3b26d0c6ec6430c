#!/usr/bin/env python3
"""A request after idle against a fresh server's first request: run it
against a freshly started server. DiscountProduct float32 at seed002's size
((4000, 5) x (10, 4000, 5)) through gpucompute.Client: the server's first request,
the median of --repeats back to back, then --repeats requests after each idle time,
each with its server total and its queue and transfer_in stages (ms). On a host whose
idle CPUs halt (a VM), every request after a pause pays for waking them, so a first
request is compared with later ones sent after the same pause
(examples/seed002_first_call.py --pause).

  python3 bench/after_idle.py --target 127.0.0.1:50051
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="localhost:50051")
    p.add_argument("--repeats", type=int, default=4, help="requests after each idle time")
    p.add_argument("--idles", default="0.001,0.01,0.1,0.3,1,2", help="idle times, s")
    args = p.parse_args()
    import gpucompute as gc
    client = gc.Client(args.target)
    client.health()
    rng = np.random.default_rng(2)
    factors = rng.random((4000, 5)).astype(np.float32)
    values = rng.random((10, 4000, 5)).astype(np.float32)

    def one():
        return client.discount_product(factors, values, return_timing=True)[1]

    def ms(seconds: float) -> str:
        return f"{seconds * 1e3:.3f}"

    first = one()
    print(f"first       total {ms(first.total)} queue {ms(first.queue)} in {ms(first.transfer_in)} "
          f"compute {ms(first.compute)} out {ms(first.transfer_out)}")
    warm = [one() for _ in range(5 * args.repeats)]
    print(f"b2b median  total {ms(statistics.median(t.total for t in warm))}  "
          f"queue {ms(statistics.median(t.queue for t in warm))} "
          f"in {ms(statistics.median(t.transfer_in for t in warm))}")
    for idle in (float(s) for s in args.idles.split(",")):
        rows = []
        for _ in range(args.repeats):
            time.sleep(idle)
            rows.append(one())
        print(f"idle {idle:5.3f} s: totals {' '.join(ms(t.total) for t in rows)} | queue "
              f"{' '.join(ms(t.queue) for t in rows)} | in {' '.join(ms(t.transfer_in) for t in rows)}")


if __name__ == "__main__":
    main()
