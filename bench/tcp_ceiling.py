#!/usr/bin/env python3
"""The loopback TCP ceiling of this machine: what plain sockets move, as the
anchor for bulk transfers over gRPC.

One sender process and one receiver process per connection (no GIL between them);
the sender sends BYTES in 4 MiB send calls from one buffer, the receiver receives
into one 4 MiB buffer (recv_into: the kernel's copy only). Prints GB/s for 1 and for
N connections at once.

    python3 bench/tcp_ceiling.py [--bytes 2147483648] [--connections 8]
"""
import argparse
import multiprocessing as mp
import socket
import time

CHUNK = 4 << 20


def receive(port, total, ready, out):
    with socket.create_server(("127.0.0.1", port)) as listener:
        ready.set()
        conn, _ = listener.accept()
        with conn:
            view = memoryview(bytearray(CHUNK))
            got = 0
            start = None
            while got < total:
                n = conn.recv_into(view)
                if n == 0:
                    break
                if start is None:
                    start = time.perf_counter()
                got += n
            out.put((got, time.perf_counter() - start))


def send(port, total):
    with socket.create_connection(("127.0.0.1", port)) as conn:
        data = memoryview(bytes(CHUNK))
        sent = 0
        while sent < total:
            n = min(CHUNK, total - sent)
            conn.sendall(data[:n])
            sent += n


def run(connections, total, base_port):
    out = mp.Queue()
    procs = []
    for c in range(connections):
        ready = mp.Event()
        r = mp.Process(target=receive, args=(base_port + c, total, ready, out))
        r.start()
        ready.wait()
        procs.append(r)
    start = time.perf_counter()
    senders = [mp.Process(target=send, args=(base_port + c, total)) for c in range(connections)]
    for s in senders:
        s.start()
    for s in senders + procs:
        s.join()
    wall = time.perf_counter() - start
    results = [out.get() for _ in range(connections)]
    moved = sum(r[0] for r in results)
    return moved / wall / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=2 << 30)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--port", type=int, default=50290)
    args = parser.parse_args()
    for connections in sorted({1, args.connections}):
        best = max(run(connections, args.bytes, args.port + 16 * i) for i in range(3))
        print(f"tcp loopback ceiling: {connections} connection(s), {args.bytes / 2**30:.2f} GiB each: "
              f"{best:.2f} GB/s (best of 3, plain send/recv_into)")


if __name__ == "__main__":
    main()
