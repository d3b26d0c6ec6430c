"""Errors carry the server's machine-readable reason (google.rpc.ErrorInfo in the
grpc-status-details-bin trailer) as ``.reason`` and ``.metadata``."""
import grpc
import numpy as np
import pytest

import gpucompute
from gpucompute._pb import pb
from gpucompute.errors import from_rpc_error
from conftest import ServerProcess


@pytest.fixture(scope="module")
def small_quota_server():
    s = ServerProcess("--buffer_quota_bytes=65536")
    yield s
    s.stop()


def test_missing_buffer_is_buffer_not_found(small_quota_server):
    with small_quota_server.client(timeout=30) as client:
        own = client.info().instance_id
        with pytest.raises(gpucompute.NotFound) as e:
            client.download(own + "0" * 24)
    assert e.value.reason == "BUFFER_NOT_FOUND"
    assert e.value.metadata["field"] == "buffer_id"


def test_buffer_of_another_instance_is_buffer_on_other_replica(small_quota_server):
    with small_quota_server.client(timeout=30) as client:
        own = client.info().instance_id
        other = ("0badcafe" if own != "0badcafe" else "1badcafe")
        with pytest.raises(gpucompute.FailedPrecondition) as e:
            client.delete(other + "a" * 24)
    assert e.value.reason == "BUFFER_ON_OTHER_REPLICA"
    assert e.value.metadata["owner_instance"] == other
    assert e.value.metadata["instance"] == own
    assert "restarted" in e.value.message  # a single server says what happened


def test_over_quota_upload_is_quota_exceeded(small_quota_server):
    with small_quota_server.client(timeout=30) as client:
        with pytest.raises(gpucompute.ResourceExhausted) as e:
            client.upload(np.ones(16384), "too big")  # 128 KiB, the quota is 64 KiB
    assert e.value.reason == "QUOTA_EXCEEDED"
    assert e.value.metadata["limit_name"] == "buffer_quota_bytes"
    assert e.value.metadata["limit"] == "65536"


def test_large_single_message_result_is_result_too_large(small_quota_server):
    request = pb.NormalizeRequest()
    values = np.ones((1, 2048))
    request.input.tensor.dtype = pb.FLOAT64
    request.input.tensor.shape.extend(values.shape)
    request.input.tensor.data = values.tobytes()
    request.output.single_message = True
    request.output.chunk_bytes = 4096
    with grpc.insecure_channel(small_quota_server.target) as channel:
        call = channel.unary_unary("/gpucompute.v1.Compute/Normalize",
                                   request_serializer=pb.NormalizeRequest.SerializeToString,
                                   response_deserializer=pb.ResultChunk.FromString)
        with pytest.raises(grpc.RpcError) as raised:
            call(request, timeout=30)
    error = from_rpc_error(raised.value, "Compute.Normalize")
    assert isinstance(error, gpucompute.FailedPrecondition)
    assert error.reason == "RESULT_TOO_LARGE_FOR_ONE_MESSAGE"
    assert error.metadata == {"field": "output.single_message", "limit": "4096",
                              "result_bytes": "16384"}
    # The client itself reads such a result as a stream instead.
    with small_quota_server.client(timeout=30) as client:
        assert client.normalize(values).shape == values.shape

