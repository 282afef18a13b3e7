"""Reading TensorBoard event files: every scalar of every tag, with its step, exactly as logged.

An event file is a sequence of TFRecord records::

    uint64 length (little-endian) | uint32 masked CRC32C of length | length bytes | uint32 masked CRC32C of bytes

and each record's bytes are an ``Event`` protocol buffer.  This reader verifies both checksums of
every record (a truncated file or a corrupted record is bad input, named by file and byte
offset), decodes the events with protobuf's runtime over the few messages it needs (declared here,
in a pool of their own, wire-compatible with TensorBoard's ``event.proto``, ``summary.proto`` and
``tensor.proto``; unknown fields are skipped), and keeps every scalar: never a sample.

A scalar is a summary value written as ``simple_value`` (tensorboardX, PyTorch's
``SummaryWriter``) or as a rank-0 numeric tensor of the ``scalars`` plugin (TensorFlow 2's
``tf.summary.scalar``, which names the plugin only on a tag's first value in each file).  Float
values come back as the float the file holds (a ``simple_value`` is a 32-bit float); integer
tensors as ints; a NaN logged stays a NaN.  Images, histograms, text and other plugins' data are
ignored.

Needs the ``tensorboard`` extra: ``protobuf`` and ``crc32c``.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from airflow_metric_gate.errors import BadInputError
from airflow_metric_gate.formats import FilePoints

#: Bytes read from the file at a time: reading stays bounded whatever the file's size.
CHUNK = 1 << 22
_HEADER = 12
_FOOTER = 4
_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
_SIGNED = 1 << 63
#: Decode the common one-scalar event by hand (tests turn it off to compare with protobuf's decoding).
_FAST_PATH = True
_SCALARS_PLUGIN = "scalars"
_DATA_CLASS_SCALAR = 1

# TensorFlow DataType numbers of the dtypes a scalar tensor may have, and how one value is decoded
# from tensor_content (little-endian).  bfloat16 is the top half of a float32.
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64, _DT_BFLOAT16, _DT_HALF = 1, 2, 3, 9, 14, 19
_CONTENT_FORMATS = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q", _DT_HALF: "<e"}


@cache
def _event_class() -> Any:
    """Build the ``Event`` message class (once), over protobuf's runtime, in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="airflow_metric_gate/tensorboard_event.proto",
                                              package="amg_tb", syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, int, int, str | None, int | None]], parent: Any = None) -> Any:
        msg = (parent.nested_type if parent is not None else file.message_type).add(name=name)
        for field_name, number, kind, label, type_name, oneof in fields:
            field = msg.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
            if oneof is not None:
                field.oneof_index = oneof
        return msg

    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("PluginData", [("plugin_name", 1, F.TYPE_STRING, one, None, None),
                           ("content", 2, F.TYPE_BYTES, one, None, None)])
    message("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, one, ".amg_tb.PluginData", None),
                                ("data_class", 4, F.TYPE_INT32, one, None, None)])
    dim = message("TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, many, ".amg_tb.TensorShapeProto.Dim", None)])
    message("Dim", [("size", 1, F.TYPE_INT64, one, None, None)], parent=dim)
    message("TensorProto", [
        ("dtype", 1, F.TYPE_INT32, one, None, None),
        ("tensor_shape", 2, F.TYPE_MESSAGE, one, ".amg_tb.TensorShapeProto", None),
        ("tensor_content", 4, F.TYPE_BYTES, one, None, None),
        ("float_val", 5, F.TYPE_FLOAT, many, None, None),
        ("double_val", 6, F.TYPE_DOUBLE, many, None, None),
        ("int_val", 7, F.TYPE_INT32, many, None, None),
        ("int64_val", 10, F.TYPE_INT64, many, None, None),
        ("half_val", 13, F.TYPE_INT32, many, None, None),
    ])
    summary = message("Summary", [("value", 1, F.TYPE_MESSAGE, many, ".amg_tb.Summary.Value", None)])
    value = message("Value", [
        ("tag", 1, F.TYPE_STRING, one, None, None),
        ("metadata", 9, F.TYPE_MESSAGE, one, ".amg_tb.SummaryMetadata", None),
        # The members of Summary.Value's oneof "value"; the non-scalar ones are kept as bytes.
        ("simple_value", 2, F.TYPE_FLOAT, one, None, 0),
        ("obsolete_old_style_histogram", 3, F.TYPE_BYTES, one, None, 0),
        ("image", 4, F.TYPE_BYTES, one, None, 0),
        ("histo", 5, F.TYPE_BYTES, one, None, 0),
        ("audio", 6, F.TYPE_BYTES, one, None, 0),
        ("tensor", 8, F.TYPE_MESSAGE, one, ".amg_tb.TensorProto", 0),
    ], parent=summary)
    value.oneof_decl.add(name="value")
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, one, None, None), ("step", 2, F.TYPE_INT64, one, None, None),
                      ("summary", 5, F.TYPE_MESSAGE, one, ".amg_tb.Summary", None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("amg_tb.Event"))


def _tensor_scalar(tensor: Any) -> Any:
    """The value of a rank-0 numeric tensor, or ``None`` when the tensor is not one."""
    if len(tensor.tensor_shape.dim) and any(d.size != 1 for d in tensor.tensor_shape.dim):
        return None
    dtype = tensor.dtype
    content = tensor.tensor_content
    if content:
        if dtype == _DT_BFLOAT16 and len(content) == 2:
            return struct.unpack("<f", b"\x00\x00" + content)[0]
        fmt = _CONTENT_FORMATS.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        return struct.unpack(fmt, content)[0]
    if dtype == _DT_FLOAT and len(tensor.float_val) == 1:
        return tensor.float_val[0]
    if dtype == _DT_DOUBLE and len(tensor.double_val) == 1:
        return tensor.double_val[0]
    if dtype == _DT_INT32 and len(tensor.int_val) == 1:
        return tensor.int_val[0]
    if dtype == _DT_INT64 and len(tensor.int64_val) == 1:
        return tensor.int64_val[0]
    if dtype == _DT_HALF and len(tensor.half_val) == 1:
        return struct.unpack("<e", struct.pack("<H", tensor.half_val[0] & 0xFFFF))[0]
    if dtype == _DT_BFLOAT16 and len(tensor.half_val) == 1:
        return struct.unpack("<f", struct.pack("<I", (tensor.half_val[0] & 0xFFFF) << 16))[0]
    return None


def require_libraries() -> None:
    """Import the libraries the reader needs (the ``tensorboard`` extra).

    :raises ImportError: protobuf or crc32c is not installed.
    """
    import crc32c  # noqa: F401
    import google.protobuf.message  # noqa: F401


class EventFileError(BadInputError):
    """An event file is truncated or corrupted at ``offset``.

    :param message: what is wrong.
    :param offset: the byte offset of the record concerned.
    """

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"record at byte offset {offset}: {message}")


def _read_more(fh: Any, buffer: bytes, pos: int, need: int) -> bytes:
    """The unread part of ``buffer`` (from ``pos``), read on from ``fh`` to hold ``need`` bytes (or all there is)."""
    parts = [buffer[pos:]]
    have = len(parts[0])
    while have < need:
        chunk = fh.read(max(CHUNK, need - have))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts)


def read_event_file(fh: Any) -> dict[str, FilePoints]:
    """Read every scalar of an event file, in file order.

    :param fh: the file, opened for reading bytes.
    :return: tag -> ``(steps, values, invalid)`` (see :data:`~airflow_metric_gate.formats.FilePoints`);
        a step below 0 is ``None`` among ``steps`` and listed in ``invalid`` at ``"event record <n>"``
        (1-based).
    :raises EventFileError: the file is truncated, a CRC does not match, or a record is not an event.
    """
    from crc32c import crc32c
    from google.protobuf.message import DecodeError

    parse = _event_class().FromString
    unpack_u64, unpack_u32, unpack_f32 = _U64.unpack_from, _U32.unpack_from, _F32.unpack_from
    fast = _FAST_PATH
    out: dict[str, FilePoints] = {}
    plugins: dict[str, str] = {}  # tag -> the plugin its metadata named (first value of the tag in this file)
    number = 0
    buffer = b""
    pos = 0  # the next record's position in buffer
    base = 0  # the file offset of buffer[0]
    size = 0  # len(buffer)
    while True:
        if size - pos < _HEADER:
            base += pos
            buffer = _read_more(fh, buffer, pos, _HEADER)
            pos, size = 0, len(buffer)
            if size < _HEADER:
                if size:
                    raise EventFileError(f"truncated: the file ends {size} byte(s) into a 12-byte record header", base)
                return out
        (length,) = unpack_u64(buffer, pos)
        crc = crc32c(buffer[pos:pos + 8])
        if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != unpack_u32(buffer, pos + 8)[0]:
            raise EventFileError("corrupted: the CRC of the record length does not match", base + pos)
        end = pos + _HEADER + length
        if size < end + _FOOTER:
            base += pos
            buffer = _read_more(fh, buffer, pos, _HEADER + length + _FOOTER)
            pos, size = 0, len(buffer)
            end = _HEADER + length
            if size < end + _FOOTER:
                raise EventFileError(
                    f"truncated: the record declares {length} byte(s) plus a 4-byte CRC, the file holds "
                    f"{max(size - _HEADER, 0)}",
                    base,
                )
        data = buffer[pos + _HEADER:end]
        crc = crc32c(data)
        if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != unpack_u32(buffer, end)[0]:
            raise EventFileError("corrupted: the CRC of the record data does not match", base + pos)
        offset = base + pos
        pos = end + _FOOTER
        number += 1
        if fast:
            # The event of one simple_value, as tensorboardX and PyTorch write it, decoded by hand:
            # 09 <wall_time: 8> [10 <step: varint>] 2a <len> 0a <len> 0a <tag len> <tag> 15 <float: 4>.
            # Anything else (and any doubt) is left to protobuf below, which decodes the same bytes alike.
            n = length
            if n > 20 and data[0] == 0x09:
                i = 9
                step = 0
                if data[9] == 0x10:
                    i, shift = 10, 0
                    while i < n:
                        b = data[i]
                        i += 1
                        step |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                # n - i < 130: every length below is one byte (< 128), as the layout reads it
                if (i + 6 < n < i + 130 and step < _SIGNED and data[i] == 0x2A and data[i + 1] == n - i - 2
                        and data[i + 2] == 0x0A and data[i + 3] == n - i - 4 and data[i + 4] == 0x0A
                        and i + data[i + 5] + 11 == n and data[n - 5] == 0x15):
                    try:
                        tag = data[i + 6:n - 5].decode()
                    except UnicodeDecodeError:
                        tag = None
                    if tag is not None:
                        points = out.get(tag)
                        if points is None:
                            points = out[tag] = ([], [], [], [])
                        points[0].append(step)
                        points[1].append(unpack_f32(data, n - 4)[0])
                        continue
        try:
            event = parse(data)
        except DecodeError as err:
            raise EventFileError(f"not a TensorBoard event: {err}", offset) from None
        values = event.summary.value
        if not values:
            continue
        step = event.step
        for value in values:
            kind = value.WhichOneof("value")
            tag = value.tag
            if kind == "simple_value":
                scalar = value.simple_value
            elif kind == "tensor":
                if value.HasField("metadata"):
                    meta = value.metadata
                    name = meta.plugin_data.plugin_name
                    if not name and meta.data_class == _DATA_CLASS_SCALAR:
                        name = _SCALARS_PLUGIN
                    plugins.setdefault(tag, name)
                if plugins.get(tag, _SCALARS_PLUGIN) != _SCALARS_PLUGIN:
                    continue
                scalar = _tensor_scalar(value.tensor)
                if scalar is None:
                    continue
            else:
                continue
            points = out.get(tag)
            if points is None:
                points = out[tag] = ([], [], [], [])
            if step >= 0:
                points[0].append(step)
            else:
                points[0].append(None)
                points[2].append((step, scalar, f"event record {number}"))
            points[1].append(scalar)
    return out
