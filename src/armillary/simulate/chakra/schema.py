"""Chakra ET message classes and the framing of trace files.

The classes are built at run time from the schema of `et_def.proto` (field names and numbers of
mlcommons/chakra schema/protobuf/et_def.proto), so no generated code ties the package to one protobuf
release; `tests/test_chakra.py` checks that this table and the .proto agree field for field.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterable, Iterator
from enum import IntEnum
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from armillary.errors import SpecError

PACKAGE = "ChakraProtoMsg"  # mlcommons/chakra schema/protobuf/et_def.proto: package
VERSION = "0.0.4"  # GlobalMetadata.version of the Chakra schema ASTRA-sim 2.0 reads


class NodeType(IntEnum):
    """mlcommons/chakra schema/protobuf/et_def.proto: enum NodeType."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7
    STORAGE_NODE = 8
    BATCH_NODE = 9
    CHECKPOINT_NODE = 10


class CollectiveCommType(IntEnum):
    """mlcommons/chakra schema/protobuf/et_def.proto: enum CollectiveCommType."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# element types of AttributeProto's values, in upstream order: `{t}_val` is field 3 + 2i, `{t}_list` 4 + 2i,
# and `{T}List` holds `repeated t values = 1` (mlcommons/chakra schema/protobuf/et_def.proto)
SCALARS = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
           "sfixed32", "sfixed64", "bool", "string", "bytes")

# message -> (field name, number, type, repeated); a type outside SCALARS names a message or an enum
MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "AttributeProto": [("name", 1, "string", False), ("doc_string", 2, "string", False)]
    + [(f"{t}_{what}", 3 + 2 * i + j, t if j == 0 else f"{t.capitalize()}List", False)
       for i, t in enumerate(SCALARS) for j, what in enumerate(("val", "list"))],
    **{f"{t.capitalize()}List": [("values", 1, t, True)] for t in SCALARS},
    "GlobalMetadata": [("version", 1, "string", False), ("attr", 2, "AttributeProto", True)],
    "Node": [("id", 1, "uint64", False), ("name", 2, "string", False), ("type", 3, "NodeType", False),
             ("ctrl_deps", 4, "uint64", True), ("data_deps", 5, "uint64", True),
             ("start_time_micros", 6, "uint64", False), ("duration_micros", 7, "uint64", False),
             ("inputs", 8, "IOInfo", False), ("outputs", 9, "IOInfo", False), ("attr", 10, "AttributeProto", True)],
    "IOInfo": [("values", 1, "string", False), ("shapes", 2, "string", False), ("types", 3, "string", False),
               ("strides", 4, "string", False)],
    "Tensor": [("tensor_id", 1, "uint64", False), ("storage_id", 2, "uint64", False), ("offset", 3, "uint64", False),
               ("num_elem", 4, "uint64", False), ("elem_bytes", 5, "uint64", False), ("device", 6, "string", False)],
}
ONEOFS = {"AttributeProto": "value"}  # every field numbered 3 and up of AttributeProto is in `oneof value`
ENUMS: tuple[type[IntEnum], ...] = (NodeType, CollectiveCommType)


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a FileDescriptorProto (what protoc would produce from et_def.proto)."""
    f = descriptor_pb2.FileDescriptorProto(name="et_def.proto", package=PACKAGE, syntax="proto3")
    field = descriptor_pb2.FieldDescriptorProto
    enums = {e.__name__ for e in ENUMS}
    for name, fields in MESSAGES.items():
        message = f.message_type.add(name=name)
        if name in ONEOFS:
            message.oneof_decl.add(name=ONEOFS[name])
        for field_name, number, kind, repeated in fields:
            fd = message.field.add(name=field_name, number=number,
                                   label=field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL)
            if kind in SCALARS:
                fd.type = getattr(field, f"TYPE_{kind.upper()}")
            else:
                fd.type = field.TYPE_ENUM if kind in enums else field.TYPE_MESSAGE
                fd.type_name = f".{PACKAGE}.{kind}"
            if name in ONEOFS and number >= 3:
                fd.oneof_index = 0
    for enum in ENUMS:
        e = f.enum_type.add(name=enum.__name__)
        for member in enum:
            e.value.add(name=member.name, number=member.value)
    return f


_POOL = descriptor_pool.DescriptorPool()  # private: no clash with chakra's own generated et_def_pb2
_POOL.AddSerializedFile(file_descriptor().SerializeToString())


def _message_class(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


GlobalMetadata = _message_class("GlobalMetadata")
Node = _message_class("Node")
AttributeProto = _message_class("AttributeProto")
Int64List = _message_class("Int64List")


def _varint(value: int) -> bytes:
    """Base-128 varint, low 7 bits first (chakra src/third_party/utils/protolib.py: _EncodeVarint32)."""
    if 1 << 14 <= value < 1 << 21:  # task ids of a large graph
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(v) for v in range(1 << 14)]  # one and two bytes: ids, ranks, sizes of most fields


def encode_varint(value: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if value < 0:
        raise SpecError("a message length is non-negative")
    return _SMALL[value] if value < 1 << 14 else _varint(value)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise SpecError("trace ends inside a length prefix")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise SpecError("length prefix longer than 10 bytes")


# Protocol Buffers wire format (protobuf.dev/programming-guides/encoding): a field's key is the varint
# (number << 3 | wire type); 0 varint, 1 64-bit, 2 length-delimited (strings, messages, packed repeated)
_VARINT, _I64, _LEN = 0, 1, 2
_ATTR_FIELDS = {f"{t}_{what}": (3 + 2 * i + j, t)
                for i, t in enumerate(SCALARS) for j, what in enumerate(("val", "list"))}
_NODE_ATTR = 10  # Node.attr
_MASK64 = (1 << 64) - 1  # a negative int32 / int64 is its 64-bit two's complement (10 bytes)


@lru_cache(maxsize=256)
def _key(number: int, wire: int) -> bytes:
    return encode_varint(number << 3 | wire)


def _length_delimited(number: int, body: bytes) -> bytes:
    return _key(number, _LEN) + encode_varint(len(body)) + body


def packed_varints(values: Iterable[int]) -> bytes:
    """The payload of a packed repeated integer field."""
    small = _SMALL
    return b"".join([small[v] if 0 <= v < 1 << 14 else _varint(v & _MASK64) for v in values])


def encode_attr(name: str, kind: str, value: Any) -> bytes:
    """One `Node.attr` entry (field 10: an AttributeProto with `name` and the oneof member `kind`, e.g.
    "int64_val", "string_val", "int64_list"), encoded as the message classes would encode it; values of
    scalar kinds are cached (task attributes repeat: kinds, streams, categories, small sizes)."""
    if kind.endswith("_list"):
        return _list_attr(name, kind, tuple(value))
    return _scalar_attr(name, kind, value)


@lru_cache(maxsize=1 << 16)
def _list_attr(name: str, kind: str, value: tuple[int, ...]) -> bytes:
    values = packed_varints(value)
    inner = _length_delimited(1, values) if values else b""
    return _length_delimited(_NODE_ATTR, _named(name) + _length_delimited(_ATTR_FIELDS[kind][0], inner))


@lru_cache(maxsize=1 << 16)
def _named(name: str) -> bytes:
    return _length_delimited(1, name.encode())


@lru_cache(maxsize=1 << 16)
def _scalar_attr(name: str, kind: str, value: Any) -> bytes:
    number, t = _ATTR_FIELDS[kind]
    if t == "double":
        encoded = _key(number, _I64) + struct.pack("<d", value)
    elif t == "string":
        encoded = _length_delimited(number, value.encode())
    elif t in ("int32", "int64", "uint32", "uint64", "bool"):
        encoded = _key(number, _VARINT) + encode_varint(int(value) & _MASK64)
    else:
        raise ValueError(f"encode_attr: no encoding for {kind}")
    return _length_delimited(_NODE_ATTR, _named(name) + encoded)


def clear_encoding_caches() -> None:
    """Drop the cached encodings (an export's: none outlives it)."""
    for cached in (_named, _scalar_attr, _list_attr):
        cached.cache_clear()


def encode_node_head(node_id: int, fields: bytes) -> bytes:
    """Node field id (1), first (a reader may skip a node it holds: `node_id`), then other encoded `fields`;
    proto3 leaves out a zero, as SerializeToString does."""
    return b"\x08" + encode_varint(node_id) + fields if node_id else fields


def encode_name_duration(name: str, duration_micros: int) -> bytes:
    """Node fields name (2) and duration_micros (7), each left out when empty or zero."""
    return ((_length_delimited(2, name.encode()) if name else b"")
            + (b"\x38" + encode_varint(duration_micros) if duration_micros else b""))


@lru_cache(maxsize=16)
def _type_field(node_type: int) -> bytes:
    return b"\x18" + encode_varint(node_type) if node_type else b""


def encode_node_tail(node_type: int, data_deps: Iterable[int]) -> bytes:
    """Node fields type (3) and data_deps (5, packed): appended to a head, the two parse as one Node (a
    message's fields may come in any order; protobuf.dev encoding, "Field Order")."""
    deps = packed_varints(data_deps)
    return _type_field(node_type) + (_length_delimited(5, deps) if deps else b"")


def write_frames(out: Any, frames: Iterable[bytes]) -> None:
    """Encoded messages, each prefixed by its length (protolib.py: encodeMessage)."""
    for body in frames:
        out.write(encode_varint(len(body)) + body)


def write_trace(path: Path, metadata: Any, nodes: Iterable[Any]) -> None:
    """GlobalMetadata, then each Node (a message, or already encoded bytes), each prefixed by its length
    (protolib.py: encodeMessage)."""
    with open(path, "wb") as out:
        write_frames(out, (m if isinstance(m, bytes) else m.SerializeToString() for m in chain((metadata,), nodes)))


MAX_TRACE_BYTES = 2**30  # one rank's trace, decompressed: far above a step's nodes (a few hundred bytes each)


def read_trace(path: Path | str) -> tuple[Any, list[Any]]:
    """GlobalMetadata and the Nodes of one file (a path or its text), plain or gzipped (protolib.py:
    openFileRd), of at most `MAX_TRACE_BYTES` (checked while decompressing: a small gzip file may expand
    without bound)."""
    path = Path(path)
    messages = read_frames(path)
    try:
        return GlobalMetadata.FromString(messages[0]), [Node.FromString(m) for m in messages[1:]]
    except DecodeError:
        raise _not_chakra(path) from None


def _not_chakra(path: Path) -> SpecError:
    return SpecError(f"{path}: not a Chakra execution trace (a message does not decode)")


def read_frames(path: Path) -> list[bytes]:
    """The encoded messages of one trace file (the GlobalMetadata first), unparsed; see `read_trace`."""
    if not path.is_file():
        raise SpecError(f"{path}: no such Chakra trace file")
    limit = f"{path}: larger than {MAX_TRACE_BYTES // 2**20:,} MiB"
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise SpecError(limit)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":  # gzip magic, as protoio.cc checks
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                data = unzipped.read(MAX_TRACE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as err:
            raise SpecError(f"{path}: not a readable gzip file ({type(err).__name__})") from None
        if len(data) > MAX_TRACE_BYTES:
            raise SpecError(f"{limit} decompressed")
    messages, pos = [], 0
    while pos < len(data):
        size, pos = decode_varint(data, pos)
        if pos + size > len(data):
            raise SpecError(f"{path}: truncated message at byte {pos}")
        messages.append(data[pos:pos + size])
        pos += size
    if not messages:
        raise SpecError(f"{path}: empty trace (no GlobalMetadata)")
    return messages


def read_metadata(path: Path) -> Any:
    """The GlobalMetadata of one trace file, reading no further than it (plain or gzipped)."""
    if not path.is_file():
        raise SpecError(f"{path}: no such Chakra trace file")
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
            head = f.read(10)
            if not head:
                raise SpecError(f"{path}: empty trace (no GlobalMetadata)")
            try:
                size, pos = decode_varint(head, 0)
            except SpecError as err:
                raise SpecError(f"{path}: {err}") from None
            if size > MAX_TRACE_BYTES:
                raise SpecError(f"{path}: a GlobalMetadata of {size:,} bytes")
            body = head[pos:] + f.read(max(size - (len(head) - pos), 0))
    except (OSError, EOFError, zlib.error) as err:
        raise SpecError(f"{path}: not a readable trace file ({type(err).__name__})") from None
    if len(body) < size:
        raise SpecError(f"{path}: truncated message at byte {pos}")
    try:
        return GlobalMetadata.FromString(body[:size])
    except DecodeError:
        raise _not_chakra(path) from None


def node_id(message: bytes) -> int | None:
    """The id of an encoded Node whose first field is its id (as written by `encode_node_head`), else None:
    a reader can skip a node it already holds without parsing it."""
    if message[:1] != b"\x08":
        return None
    try:
        return decode_varint(message, 1)[0]
    except SpecError:
        return None


def iter_nodes(path: Path) -> Iterator[tuple[int | None, bytes]]:
    """(the id `node_id` finds or None, encoded Node) for each Node of one trace file."""
    for message in read_frames(path)[1:]:
        yield node_id(message), message


def attributes(message: Any, only: frozenset[str] | None = None) -> dict[str, Any]:
    """Attribute name -> value (a list for list values), whichever member of the oneof holds it; only the
    names in `only` if given."""
    out: dict[str, Any] = {}
    for a in message.attr:
        if only is not None and a.name not in only:
            continue
        which = a.WhichOneof("value")
        if which is not None:
            value = getattr(a, which)
            out[a.name] = list(value.values) if which.endswith("_list") else value
    return out
