#!/usr/bin/env python3
"""One large upload and download through the Python client, as a caller uses it: timed
end to end (median of --repeat), checked byte-exact; with --server-pid, the server's CPU
time per GB moved. Prints the same line format as bulk-transfer-bench.

    python3 bench/bulk_transfer.py --target 127.0.0.1:50051 --bytes 2147483648 [--stripes 4]
        [--processes [--stripe-array]] [--chunk-bytes N] [--upload-chunk-bytes N]

--processes: the stripes in worker processes (Client(stripe_processes=True)), started
before the timed runs (the time printed apart); client core-s/GB then counts the
workers' CPU too. The upload's data is an ordinary array, copied into shared memory
by the call (timed), or with --stripe-array made in Client.stripe_array (no copy).
"""
import argparse
import ctypes
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client" / "python"))
import gpucompute  # noqa: E402


def cpu_seconds(pid):
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def keep_freed_memory_mapped():
    """What a caller may do at start-up (here, or GLIBC_TUNABLES=glibc.malloc.mmap_threshold=
    67108864:glibc.malloc.trim_threshold=1073741824 in its environment): glibc keeps
    freed blocks up to 64 MiB and 1 GiB of freed heap, so grpc's per-message buffers
    reuse pages instead of faulting fresh ones in (the C++ client's
    client/bulk_memory.h settings). The client library leaves it to the process."""
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    if not hasattr(libc, "mallopt") or not (libc.mallopt(m_mmap_threshold, 64 << 20)
                                            and libc.mallopt(m_trim_threshold, 1 << 30)):
        sys.exit("--keep-freed-memory needs glibc's mallopt")


def faults():
    """Minor page faults of this process so far (fresh memory touched: a steadier
    measure of allocation churn than time on a loaded machine)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def report(label, stripes, what, nbytes, samples):
    samples.sort()
    seconds, cpu, own, flt = samples[len(samples) // 2]
    gb = nbytes / 1e9
    print(f"{label} stripes={stripes} {what} {nbytes / 2**30:.2f} GiB median {seconds:.3f} s "
          f"{gb / seconds:.2f} GB/s (best {gb / samples[0][0]:.2f}) server {cpu / gb:.2f} "
          f"client {own / gb:.2f} core-s/GB, {flt / gb:.0f} faults/GB",
          flush=True)


def client_cpu(client):
    """This process's CPU seconds and its stripe workers'."""
    workers = client._workers.pids() if client._workers is not None else []
    return time.process_time() + sum(cpu_seconds(pid) for pid in workers)


def mark(client, server_pid):
    return (time.perf_counter(), cpu_seconds(server_pid), client_cpu(client), faults())


def since(start, client, server_pid):
    """(seconds, server core-s, client core-s, client faults) since ``start``."""
    return tuple(b - a for a, b in zip(start, mark(client, server_pid)))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--bytes", type=int, default=2 << 30)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stripes", type=int, default=1)
    p.add_argument("--server-pid", type=int, default=0)
    p.add_argument("--label", default="python")
    p.add_argument("--chunk-bytes", type=int, default=None,
                   help="download chunk size (default: the client's)")
    p.add_argument("--upload-chunk-bytes", type=int, default=None,
                   help="upload message size (default: the client's)")
    p.add_argument("--processes", action="store_true",
                   help="stripes in worker processes (stripe_processes=True)")
    p.add_argument("--stripe-array", action="store_true",
                   help="with --processes: the upload's data made in Client.stripe_array")
    p.add_argument("--keep-freed-memory", action="store_true",
                   help="glibc malloc keeps freed memory mapped (keep_freed_memory_mapped)")
    args = p.parse_args()
    if args.keep_freed_memory:
        keep_freed_memory_mapped()
    kwargs = {"stripes": args.stripes} if args.stripes != 1 else {}
    if args.processes:
        kwargs["stripe_processes"] = True
    client = gpucompute.Client(args.target, timeout=600, **kwargs)
    label = args.label + (" processes" if args.processes else "")
    data = (np.arange(args.bytes // 4, dtype=np.int64) % 1000003).astype(np.float32) * 0.5
    if args.processes and args.stripe_array:
        shared = client.stripe_array(data.shape, data.dtype)
        shared[...] = data
        data, label = shared, label + " (stripe_array)"
    if client._workers is not None:  # start the workers: what the first call pays
        t0 = time.perf_counter()
        client._workers.start()
        print(f"{label}: {args.stripes} workers started in "
              f"{time.perf_counter() - t0:.2f} s", flush=True)
    ups, downs = [], []
    for _ in range(args.repeat):
        start = mark(client, args.server_pid)
        buf = client.upload(data, "bulk", chunk_bytes=args.upload_chunk_bytes)
        ups.append(since(start, client, args.server_pid))
        start = mark(client, args.server_pid)
        back = client.download(buf, chunk_bytes=args.chunk_bytes)
        downs.append(since(start, client, args.server_pid))
        if not np.array_equal(back.view(np.uint32), data.view(np.uint32)):
            sys.exit("download differs from the upload")
        del back
        client.delete(buf)
    report(label, args.stripes, "upload", data.nbytes, ups)
    report(label, args.stripes, "download", data.nbytes, downs)
    client.close()


if __name__ == "__main__":
    main()
