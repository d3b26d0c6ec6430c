"""Result-stream assembly, call metadata and deadlines, against a scripted in-process gRPC
server."""
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

import gpucompute as gc
from gpucompute import _wire
from gpucompute._pb import pb


class FakeServer:
    """Answers Compute.Normalize with a scripted list of ResultChunk messages (a float:
    a pause of that many seconds),
    Buffers.Upload (after ``upload_delay`` seconds) and Buffers.Delete, and
    grpc.health.v1.Health/Check with SERVING, recording each call's metadata and the
    deadline left to each RPC (``time_left``: [(rpc, seconds or None)])."""

    def __init__(self):
        self.script = []
        self.metadata = []
        self.time_left = []
        self.upload_delay = 0.0
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "Normalize": grpc.unary_stream_rpc_method_handler(self._normalize),
        }
        buffers = {
            "Upload": grpc.stream_unary_rpc_method_handler(self._upload),
            "Delete": grpc.unary_unary_rpc_method_handler(self._delete),
        }
        self.server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler("gpucompute.v1.Compute", handlers),
            grpc.method_handlers_generic_handler("gpucompute.v1.Buffers", buffers),
            grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
                "Check": grpc.unary_unary_rpc_method_handler(self._check)}),
        ))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = f"127.0.0.1:{self.port}"

    def _record(self, context, rpc=""):
        self.metadata.append(dict(context.invocation_metadata()))
        self.time_left.append((rpc, context.time_remaining()))

    def _upload(self, requests, context):
        self._record(context, "Upload")
        header = pb.UploadRequest.FromString(next(requests)).header
        size = sum(len(pb.UploadRequest.FromString(r).data) for r in requests)
        time.sleep(self.upload_delay)
        return pb.BufferInfo(id="b" * 32, dtype=header.dtype, shape=header.shape,
                             bytes=size, location="fake:0").SerializeToString()

    def _delete(self, request, context):
        self._record(context, "Delete")
        return pb.DeleteResponse(freed_bytes=1).SerializeToString()

    def _check(self, request, context):
        self._record(context)
        return b"\x08\x01"  # status: SERVING

    def _normalize(self, request, context):
        self._record(context, "Normalize")
        for item in self.script:
            if isinstance(item, float):  # a pause, in seconds
                time.sleep(item)
                continue
            yield item if isinstance(item, bytes) else item.SerializeToString()

    def stop(self):
        self.server.stop(0)


@pytest.fixture
def fake():
    s = FakeServer()
    yield s
    s.stop()


def header(shape, dtype=pb.FLOAT64, total=None):
    n = int(np.prod(shape)) * (8 if dtype == pb.FLOAT64 else 4)
    return pb.ResultChunk(header=pb.ResultHeader(dtype=dtype, shape=shape,
                                                 total_bytes=n if total is None else total))


def data(offset, payload):
    return pb.ResultChunk(data=pb.ResultData(offset=offset, data=payload))


def trailer(stored=None):
    t = pb.ResultTrailer(timing=pb.Timing(queue_us=1, transfer_in_us=2, compute_us=3,
                                          transfer_out_us=4, total_us=10),
                         backend="fake", device="fake:0")
    if stored is not None:
        t.stored_buffer.CopyFrom(stored)
    return pb.ResultChunk(trailer=t)


def chunks_of(arr, step):
    raw = arr.tobytes()
    return [data(off, raw[off:off + step]) for off in range(0, len(raw), step)]


def test_assembles_chunks_in_one_array(fake):
    want = np.arange(1000, dtype=np.float64).reshape(10, 100)
    fake.script = [header([10, 100])] + chunks_of(want, 777) + [trailer()]
    c = gc.Client(fake.target)
    out, t = c.normalize(np.ones(3), return_timing=True)
    np.testing.assert_array_equal(out, want)
    assert out.flags.c_contiguous and out.flags.writeable
    assert (t.queue, t.transfer_in, t.compute, t.transfer_out, t.total) == (
        1e-6, 2e-6, 3e-6, 4e-6, 10e-6)
    assert (t.backend, t.device) == ("fake", "fake:0")


def test_float32_result(fake):
    want = np.linspace(0, 1, 33, dtype=np.float32)
    fake.script = [header([33], pb.FLOAT32)] + chunks_of(want, 64) + [trailer()]
    out = gc.Client(fake.target).normalize(np.ones(3))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, want)


def test_data_with_extra_fields_still_parses(fake):
    want = np.arange(4, dtype=np.float64)
    # ResultData with an unknown field 7 (varint) before offset: not the fast path's shape
    inner = b"\x38\x05" + b"\x08\x00" + b"\x12" + bytes([32]) + want.tobytes()
    raw = b"\x12" + bytes([len(inner)]) + inner
    fake.script = [header([4]), raw, trailer()]
    np.testing.assert_array_equal(gc.Client(fake.target).normalize(np.ones(3)), want)


@pytest.mark.parametrize("case, match", [
    ("gap", "offset"),
    ("overlap", "offset"),
    ("short", "received"),
    ("past_end", "runs past"),
    ("no_header", "before the header"),
    ("no_trailer", "without a trailer"),
    ("bad_total", "header says"),
    ("two_headers", "second header"),
    ("data_after_trailer", "after the trailer"),
])
def test_broken_streams_raise_protocol_error(fake, case, match):
    arr = np.arange(100, dtype=np.float64)
    chunks = chunks_of(arr, 200)  # 4 chunks of 200 bytes
    scripts = {
        "gap": [header([100])] + chunks[:1] + chunks[2:] + [trailer()],
        "overlap": [header([100])] + chunks[:2] + chunks[1:] + [trailer()],
        "short": [header([100])] + chunks[:3] + [trailer()],
        "past_end": [header([10])] + chunks + [trailer()],
        "no_header": chunks + [trailer()],
        "no_trailer": [header([100])] + chunks,
        "bad_total": [header([100], total=12)] + chunks + [trailer()],
        "two_headers": [header([100]), header([100])] + chunks + [trailer()],
        "data_after_trailer": [header([100])] + chunks[:3] + [trailer()] + chunks[3:],
    }
    fake.script = scripts[case]
    with pytest.raises(gc.ProtocolError, match=match) as e:
        gc.Client(fake.target).normalize(np.ones(3))
    assert e.value.code == grpc.StatusCode.DATA_LOSS
    assert isinstance(e.value, gc.GpuComputeError)


def test_keep_on_device_needs_stored_buffer(fake):
    fake.script = [header([3]), trailer()]
    with pytest.raises(gc.ProtocolError, match="stored_buffer"):
        gc.Client(fake.target).normalize(np.ones(3), keep_on_device=True)
    info = pb.BufferInfo(id="a" * 32, name="kept", dtype=pb.FLOAT64, shape=[3], bytes=24,
                         location="fake:0")
    fake.script = [header([3]), trailer(info)]
    dev = gc.Client(fake.target).normalize(np.ones(3), keep_on_device=True)
    assert isinstance(dev, gc.DeviceArray)
    assert (dev.id, dev.name, dev.shape, dev.dtype, dev.nbytes, dev.location) == (
        "a" * 32, "kept", (3,), np.float64, 24, "fake:0")


def test_token_sent_as_bearer_metadata(fake):
    fake.script = [header([1]), data(0, np.ones(1).tobytes()), trailer()]
    c = gc.Client(fake.target, token="s3cret")
    assert c.health() == "SERVING"
    c.normalize(np.ones(3))
    assert [m.get("authorization") for m in fake.metadata] == ["Bearer s3cret"] * 2
    fake.metadata.clear()
    gc.Client(fake.target).health()
    assert "authorization" not in fake.metadata[0]


def test_wire_helpers_roundtrip():
    for v in (0, 1, 127, 128, 300, 2 ** 32, 2 ** 63 - 1):
        enc = _wire.encode_varint(v)
        assert _wire._read_varint(enc, 0) == (v, len(enc))
    view = memoryview(np.arange(1000, dtype=np.float64).reshape(-1)).cast("B")
    raw = _wire.encode_upload_request(_wire.UploadData(view[8:4000]))
    assert pb.UploadRequest.FromString(raw).data == bytes(view[8:4000])
    msg = data(2 ** 40, b"xyz").SerializeToString()
    chunk = _wire.decode_result_chunk(msg)
    assert isinstance(chunk, _wire.DataChunk)
    assert chunk.offset == 2 ** 40 and bytes(chunk.data) == b"xyz"
    assert _wire.decode_result_chunk(trailer().SerializeToString()).WhichOneof("kind") == \
        "trailer"
    assert _wire.encode_health_request("") == b""
    assert _wire.decode_health_response(b"") == "UNKNOWN"
    assert _wire.decode_health_response(b"\x08\x02") == "NOT_SERVING"


def test_timeout_is_the_whole_calls_deadline(fake):
    """The upload made first and the compute share the call's one deadline: the compute
    gets what the upload left, and an expired deadline names the call, not Buffers.Upload."""
    fake.upload_delay = 0.3
    fake.script = [header([1]), data(0, np.ones(1).tobytes()), trailer()]
    c = gc.Client(fake.target, upload_threshold=8)
    c.normalize(np.ones(3), timeout=5)
    left = dict((rpc, t) for rpc, t in fake.time_left if rpc in ("Upload", "Normalize"))
    assert left["Upload"] > 4.5 and left["Normalize"] < 4.8  # 0.3 s went to the upload

    fake.upload_delay = 0.6
    with pytest.raises(gc.DeadlineExceeded) as e:
        c.normalize(np.ones(3), timeout=0.5)
    assert e.value.call == "normalize"
    assert str(e.value).startswith("normalize: DEADLINE_EXCEEDED")
    fake.upload_delay = 0.3
    fake.script = [0.3] + fake.script
    with pytest.raises(gc.DeadlineExceeded) as e:  # each RPC alone fits, the two do not
        c.normalize(np.ones(3), timeout=0.45)
    assert e.value.call == "normalize"
    assert fake.time_left[-1][0] == "Delete"  # the temporary still went, past the deadline
