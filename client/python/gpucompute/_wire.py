"""Hand-rolled protobuf wire encoding for the few hot or tiny messages.

- Result data chunks (ResultChunk{data: ResultData{offset, data}}) are decoded here so
  that their payload is a memoryview into the received bytes, copied once, straight
  into the result array; every other ResultChunk goes through the generated class.
- Upload data chunks (UploadRequest{data}, and StreamingComputeRequest{data}, which has
  its layout) are framed here from memoryviews of the source arrays: one copy instead
  of two.
- grpc.health.v1 HealthCheckRequest/Response: one field each.
"""
from __future__ import annotations

from typing import Any, Tuple, Union

from ._pb import pb

_WT_VARINT, _WT_I64, _WT_LEN, _WT_I32 = 0, 1, 2, 5

#: what the varint readers index: received bytes or a view of them
Buffer = Union[bytes, memoryview]


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: Buffer, pos: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _skip(buf: Buffer, pos: int, wire_type: int) -> int:
    if wire_type == _WT_VARINT:
        return _read_varint(buf, pos)[1]
    if wire_type == _WT_I64:
        return pos + 8
    if wire_type == _WT_I32:
        return pos + 4
    if wire_type == _WT_LEN:
        n, pos = _read_varint(buf, pos)
        return pos + n
    raise ValueError(f"unsupported wire type {wire_type}")


class DataChunk:
    """A decoded ResultData: offset and a zero-copy view of the payload."""

    __slots__ = ("offset", "data")

    def __init__(self, offset: int, data: memoryview):
        self.offset = offset
        self.data = data


def decode_result_chunk(raw: bytes) -> Union[DataChunk, "pb.ResultChunk"]:
    """response_deserializer for ResultChunk streams."""
    # Fast path: a message made of exactly one field 2 (data), as the server sends it.
    if len(raw) >= 2 and raw[0] == 0x12:
        try:
            n, pos = _read_varint(raw, 1)
            if pos + n == len(raw):
                view = memoryview(raw)
                end = pos + n
                offset = 0
                payload = view[0:0]
                while pos < end:
                    key, pos = _read_varint(raw, pos)
                    field, wt = key >> 3, key & 7
                    if field == 1 and wt == _WT_VARINT:
                        offset, pos = _read_varint(raw, pos)
                    elif field == 2 and wt == _WT_LEN:
                        m, pos = _read_varint(raw, pos)
                        if pos + m > end:
                            raise ValueError("truncated data")
                        payload = view[pos:pos + m]
                        pos += m
                    else:
                        pos = _skip(raw, pos, wt)
                if pos == end:
                    return DataChunk(offset, payload)
        except (ValueError, IndexError):
            pass  # let the generated parser decide (and report)
    return pb.ResultChunk.FromString(raw)


class UploadData:
    """A data chunk: byte views of the source arrays, sent one after the other."""

    __slots__ = ("views",)

    def __init__(self, *views: memoryview):
        self.views = views


def encode_upload_request(item: Any) -> bytes:
    """request_serializer for Upload and StreamingCompute: UploadData framed by hand,
    messages as usual."""
    if isinstance(item, UploadData):
        size = sum(view.nbytes for view in item.views)
        return b"".join((b"\x12", encode_varint(size), *item.views))
    return bytes(item.SerializeToString())


# grpc.health.v1 ------------------------------------------------------------------

HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def encode_health_request(service: str) -> bytes:
    data = service.encode("utf-8")
    if not data:
        return b""
    return b"\x0a" + encode_varint(len(data)) + data


def decode_health_response(raw: bytes) -> str:
    status = 0
    pos = 0
    while pos < len(raw):
        key, pos = _read_varint(raw, pos)
        field, wt = key >> 3, key & 7
        if field == 1 and wt == _WT_VARINT:
            status, pos = _read_varint(raw, pos)
        else:
            pos = _skip(raw, pos, wt)
    return HEALTH_STATUS.get(status, f"UNKNOWN({status})")
