#!/usr/bin/python3
"""One kind of hostile client, run as its own process by scripts/hostile_soak/soak.py.

    hostile.py KIND --target=127.0.0.1:PORT --duration=S --count=N [--mesh=N_LAT,N_LON]
               [--rate=PER_S] [--hold=S] --out=JSON

KIND (each call on its own channels, all on one asyncio loop):
  idle       keeps COUNT streams open that never send: Upload streams (half with no
             message, half with only a header) and Compute.Normalize streams whose request
             never comes; a stream the server ends is reopened.
  stalled    keeps COUNT HaversineGrid calls of an 8 MiB result (1 x 1024 x 1024 float64)
             that read the header, then stop reading for HOLD seconds; then reads on to
             learn how the server ended the call (or cancels it) and reopens it.
  metadata   GetInfo calls carrying a 16 KiB metadata value, RATE per second.
  resets     Normalize calls cancelled right after they start (RST_STREAM), RATE per second.
  mesh       keeps COUNT HaversineGrid calls of a MESH float64 mesh (default 16384 x 16384,
             2 GiB) unread for HOLD seconds, then as the stalled ones.
  streaming  keeps COUNT StreamingCompute calls open that send their header, then nothing;
             a stream the server ends is reopened.
  sessions   keeps COUNT Compute.Session calls that send 300 HaversineGrid requests of 1 MiB
             answers and never read, for HOLD seconds; then cancels and reopens them.
  regions    registers shared-memory regions RATE per second, each over an object of its
             own (4 KiB), keeping at most COUNT; a refused one is counted, the oldest
             unregistered and unlinked.

Stops by itself after DURATION seconds: cancels what is still open and writes
{"kind", "attempted", "codes": {status code: count}, "open_at_end": {label: count}} to OUT,
where codes are the server's answers (CANCELLED_BY_US counts the calls this worker cancelled,
among them those still open at the end).
"""

import argparse
import asyncio
import collections
import json
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
from gpucompute._pb import pb  # noqa: E402

# Calls the server may take per connection: below --max_concurrent_streams (256) and
# --max_in_flight_per_connection (128), so that every call is really open on the server.
STREAMS_PER_CHANNEL = {"idle": 200, "stalled": 100, "mesh": 100, "metadata": 100, "resets": 100,
                       "streaming": 100, "sessions": 1, "regions": 100}
CANCELLED_BY_US = "CANCELLED_BY_US"
PAD_METADATA = (("x-hostile-pad", "p" * 16384),)
ONES = b"\x00\x00\x80\x3f" * (16 * 256)  # float32 1.0: a valid Normalize input


def identity(x):
    return x


class Hostile:
    def __init__(self, args):
        self.args = args
        self.deadline = time.monotonic() + args.duration
        self.codes = collections.Counter()
        self.attempted = 0
        self.open_calls = {}  # call -> label
        self.channels = []

    def left(self):
        return self.deadline - time.monotonic()

    def channel(self, slot):
        per = STREAMS_PER_CHANNEL[self.args.kind]
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
                   ("grpc.use_local_subchannel_pool", 1)]
        if self.args.kind in ("stalled", "mesh"):
            # A reader that stops reading with a window of 64 KiB, not one that BDP probing
            # grew to megabytes: the server's writes stall instead of landing in our buffers.
            options += [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]
        while len(self.channels) <= slot // per:
            self.channels.append(grpc.aio.insecure_channel(self.args.target, options=options))
        return self.channels[slot // per]

    def method(self, slot, kind, path, response=identity):
        factory = getattr(self.channel(slot), kind)
        return factory(path, request_serializer=lambda m: m.SerializeToString(),
                       response_deserializer=response)

    async def finish(self, call, label=""):
        """Waits for the server's status of `call` (at most until the deadline); counts it
        under label + code."""
        self.open_calls[call] = label
        try:
            code = (await asyncio.wait_for(call.code(), timeout=max(0.0, self.left()))).name
        except asyncio.TimeoutError:
            return False  # still open: run() cancels it
        except grpc.RpcError as e:  # code() reports a status; this is belt and braces
            code = e.code().name
        del self.open_calls[call]
        self.codes[label + code] += 1
        return True

    # -- kinds -----------------------------------------------------------------------

    async def idle_slot(self, slot):
        while self.left() > 0:
            self.attempted += 1
            label = ("compute, no request: ", "upload, no message: ",
                     "upload, header only: ")[slot % 3]
            if slot % 3 == 0:  # a compute stream whose request never comes
                call = self.method(slot, "stream_stream", "/gpucompute.v1.Compute/Normalize")()
            else:  # an Upload stream: nothing at all, or only its header
                call = self.method(slot, "stream_unary", "/gpucompute.v1.Buffers/Upload")()
                if slot % 3 == 2:
                    header = pb.UploadHeader(name=f"hostile-idle-{slot}", dtype=pb.FLOAT32,
                                             shape=[1024])
                    try:
                        await call.write(pb.UploadRequest(header=header))
                    except (grpc.RpcError, asyncio.InvalidStateError):
                        pass
            if not await self.finish(call, label):
                return
            await asyncio.sleep(0.1)

    async def streaming_slot(self, slot):
        header = pb.StreamingComputeRequest(header=pb.StreamingComputeHeader(
            operation=pb.STREAMING_NORMALIZE, dtype=pb.FLOAT32, shape=[1 << 20, 256]))
        while self.left() > 0:
            self.attempted += 1
            call = self.method(slot, "stream_stream", "/gpucompute.v1.Compute/StreamingCompute")()
            try:
                await call.write(header)
            except (grpc.RpcError, asyncio.InvalidStateError):
                pass
            if not await self.finish(call, "streaming, header only: "):
                return
            await asyncio.sleep(0.1)

    async def session_slot(self, slot):
        request = pb.SessionRequest(haversine_grid=pb.HaversineGridRequest(
            mesh=pb.LatLonMesh(lat_start=-60, lat_stop=60, n_lat=512, lon_start=-180,
                               lon_stop=180, n_lon=512, dtype=pb.FLOAT32),
            references=[pb.GeoPoint(lat=48.85, lon=2.35)], radius=6371.0))
        while self.left() > 0:
            self.attempted += 1
            call = self.method(slot, "stream_stream", "/gpucompute.v1.Compute/Session")()
            self.open_calls[call] = "session, never read: "
            try:
                for i in range(300):
                    request.id = i + 1
                    # A server that stops reading leaves these writes waiting: bounded.
                    await asyncio.wait_for(call.write(request), timeout=max(0.1, self.left()))
            except (asyncio.TimeoutError, grpc.RpcError, asyncio.InvalidStateError):
                pass
            await asyncio.sleep(min(self.args.hold, max(0.0, self.left())))
            call.cancel()
            del self.open_calls[call]
            self.codes[CANCELLED_BY_US] += 1

    async def region_flood(self):
        from multiprocessing import shared_memory
        held = collections.deque()  # (region id, SharedMemory)
        register = self.method(0, "unary_unary",
                               "/gpucompute.v1.SharedMemory/RegisterSystemSharedMemory",
                               pb.SharedMemoryRegionInfo.FromString)
        unregister = self.method(0, "unary_unary",
                                 "/gpucompute.v1.SharedMemory/UnregisterSharedMemory")

        async def drop_oldest():
            region_id, memory = held.popleft()
            try:
                await unregister(pb.UnregisterSharedMemoryRequest(region_id=region_id), timeout=5)
            except grpc.RpcError:
                pass
            memory.close()
            memory.unlink()

        async def one(i):
            memory = shared_memory.SharedMemory(create=True, size=4096)
            try:
                info = await register(pb.RegisterSystemSharedMemoryRequest(
                    name=f"flood-{i}", key="/" + memory.name, byte_size=4096), timeout=5)
                held.append((info.id, memory))
                self.codes["OK"] += 1
            except grpc.RpcError as e:
                self.codes[e.code().name] += 1
                memory.close()
                memory.unlink()
                if held:
                    await drop_oldest()
            while len(held) > self.args.count:
                await drop_oldest()

        await self.paced(one)
        while held:
            await drop_oldest()

    def mesh_request(self, n_lat, n_lon):
        return pb.HaversineGridRequest(
            mesh=pb.LatLonMesh(lat_start=-60, lat_stop=60, n_lat=n_lat, lon_start=-180,
                               lon_stop=180, n_lon=n_lon, dtype=pb.FLOAT64),
            references=[pb.GeoPoint(lat=48.85, lon=2.35)], radius=6371.0)

    async def unread_slot(self, slot, n_lat, n_lon, read_header, drain):
        """Holds one result stream unread for --hold seconds, then reads up to `drain`
        messages to learn how the server ended it (gRPC gives a client the status only
        after the messages before it), and reopens it."""
        request = self.mesh_request(n_lat, n_lon)
        while self.left() > 0:
            self.attempted += 1
            call = self.method(slot, "unary_stream", "/gpucompute.v1.Compute/HaversineGrid")(
                request)
            self.open_calls[call] = ""
            try:
                if read_header:
                    await asyncio.wait_for(call.read(), timeout=max(0.0, self.left()))
                await asyncio.sleep(min(self.args.hold, max(0.0, self.left())))
                if self.left() <= 0:
                    return
                for _ in range(drain):
                    read = asyncio.wait_for(call.read(), timeout=min(5.0, max(0.1, self.left())))
                    if await read is grpc.aio.EOF:
                        break
                else:
                    call.cancel()  # the server still streams after --hold
                    self.codes["STILL_STREAMING_AFTER_HOLD"] += 1
                    del self.open_calls[call]
                    continue
            except (asyncio.TimeoutError, grpc.RpcError):
                pass
            if not await self.finish(call):
                return

    async def paced(self, one_call):
        """Starts one_call(i) RATE times a second until the deadline (at most 64 at once)."""
        limit = asyncio.Semaphore(64)
        interval = 1.0 / self.args.rate
        next_start = time.monotonic()
        tasks = set()
        i = 0
        while self.left() > 0:
            await limit.acquire()
            task = asyncio.ensure_future(one_call(i))
            task.add_done_callback(lambda t: (limit.release(), tasks.discard(t)))
            tasks.add(task)
            self.attempted += 1
            i += 1
            next_start += interval
            delay = next_start - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -1.0:  # fell behind: do not burst to catch up
                next_start = time.monotonic()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def metadata_call(self, i):
        call = self.method(i % 4, "unary_unary", "/gpucompute.v1.Server/GetInfo")(
            pb.GetInfoRequest(), metadata=PAD_METADATA, timeout=5)
        await self.finish(call)

    async def reset_call(self, i):
        request = pb.NormalizeRequest(input=pb.Operand(tensor=pb.Tensor(
            dtype=pb.FLOAT32, shape=[16, 256], data=ONES)))
        call = self.method(i % 4, "unary_stream", "/gpucompute.v1.Compute/Normalize")(request)
        await asyncio.sleep(0)  # let the call start, then reset it
        call.cancel()
        self.codes[CANCELLED_BY_US] += 1

    async def run(self):
        kind, count = self.args.kind, self.args.count
        if kind == "idle":
            jobs = [self.idle_slot(s) for s in range(count)]
        elif kind == "stalled":
            jobs = [self.unread_slot(s, 1024, 1024, True, 16) for s in range(count)]
        elif kind == "mesh":
            n_lat, n_lon = self.args.mesh
            jobs = [self.unread_slot(s, n_lat, n_lon, False, 4) for s in range(count)]
        elif kind == "streaming":
            jobs = [self.streaming_slot(s) for s in range(count)]
        elif kind == "sessions":
            jobs = [self.session_slot(s) for s in range(count)]
        elif kind == "regions":
            jobs = [self.region_flood()]
        elif kind == "metadata":
            jobs = [self.paced(self.metadata_call)]
        else:
            jobs = [self.paced(self.reset_call)]
        await asyncio.gather(*jobs)
        open_at_end = collections.Counter(label.rstrip(": ") or "calls"
                                          for label in self.open_calls.values())
        for call in list(self.open_calls):
            call.cancel()
            self.codes[CANCELLED_BY_US] += 1
        for channel in self.channels:
            await channel.close()
        return open_at_end


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["idle", "stalled", "metadata", "resets", "mesh",
                                         "streaming", "sessions", "regions"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--mesh", type=lambda s: [int(x) for x in s.split(",")],
                        default=[16384, 16384])
    parser.add_argument("--hold", type=float, default=35.0,
                        help="seconds a stalled or mesh call stays unread (35)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    hostile = Hostile(args)
    open_at_end = asyncio.run(hostile.run())
    with open(args.out, "w") as f:
        json.dump({"kind": args.kind, "attempted": hostile.attempted,
                   "codes": dict(hostile.codes), "open_at_end": dict(open_at_end)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
