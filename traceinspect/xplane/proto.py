"""The XSpace protobuf schema, built in code from one table of field numbers.

Why a descriptor built in code rather than a ``.proto`` and a generated ``_pb2`` module:
generated modules are tied to the protobuf runtime that generated them, and neither jax
nor xprof ships ``xplane_pb2`` for us to import. The table below *is* the schema; to
change it, edit the table (there is nothing to regenerate). Field numbers follow
``tsl/profiler/protobuf/xplane.proto`` (package ``tensorflow.profiler``), recorded in
the project's field notes. ``tests/test_proto.py`` checks them against that list and
against the C decoder, which hard-codes the same numbers in ``_wire.c``.

Two deliberate differences. The metadata maps are declared as repeated entry messages
(wire-identical to ``map<int64, ...>``): upb moves a map entry that holds an unknown or
mistyped field out of the map entirely, while XProf's C++ reader (and our C decoder)
keeps the entry; as plain messages both decoders see the same entries, last key wins.
And every ``string`` field is declared ``bytes``. They share a
wire type, and profilers written in C++ do not always emit valid UTF-8 (truncated kernel
names, raw bytes in names); with ``bytes`` the parser never rejects such a file, and we
decode strings ourselves exactly as the C decoder does (names with ``backslashreplace``,
stat values with ``surrogateescape``: see ``decode_str`` in ``_wire.c``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tensorflow.profiler"

_T = descriptor_pb2.FieldDescriptorProto
# (name, number, type, label, message type name or None, oneof index or None)
_Field = tuple[str, int, int, int, "str | None", "int | None"]
OPT, REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED

# message name -> (fields, oneof names)
SCHEMA: dict[str, tuple[list[_Field], list[str]]] = {
    "XSpace": (
        [
            ("planes", 1, _T.TYPE_MESSAGE, REP, "XPlane", None),
            ("errors", 2, _T.TYPE_BYTES, REP, None, None),
            ("warnings", 3, _T.TYPE_BYTES, REP, None, None),
            ("hostnames", 4, _T.TYPE_BYTES, REP, None, None),
        ],
        [],
    ),
    "XPlane": (
        [
            ("id", 1, _T.TYPE_INT64, OPT, None, None),
            ("name", 2, _T.TYPE_BYTES, OPT, None, None),
            ("lines", 3, _T.TYPE_MESSAGE, REP, "XLine", None),
            ("event_metadata", 4, _T.TYPE_MESSAGE, REP, "XPlane.EventMetadataEntry", None),
            ("stat_metadata", 5, _T.TYPE_MESSAGE, REP, "XPlane.StatMetadataEntry", None),
            ("stats", 6, _T.TYPE_MESSAGE, REP, "XStat", None),
        ],
        [],
    ),
    "XPlane.EventMetadataEntry": (
        [
            ("key", 1, _T.TYPE_INT64, OPT, None, None),
            ("value", 2, _T.TYPE_MESSAGE, OPT, "XEventMetadata", None),
        ],
        [],
    ),
    "XPlane.StatMetadataEntry": (
        [
            ("key", 1, _T.TYPE_INT64, OPT, None, None),
            ("value", 2, _T.TYPE_MESSAGE, OPT, "XStatMetadata", None),
        ],
        [],
    ),
    "XLine": (
        [
            ("id", 1, _T.TYPE_INT64, OPT, None, None),
            ("name", 2, _T.TYPE_BYTES, OPT, None, None),
            ("timestamp_ns", 3, _T.TYPE_INT64, OPT, None, None),
            ("events", 4, _T.TYPE_MESSAGE, REP, "XEvent", None),
            ("duration_ps", 9, _T.TYPE_INT64, OPT, None, None),
            ("display_id", 10, _T.TYPE_INT64, OPT, None, None),
            ("display_name", 11, _T.TYPE_BYTES, OPT, None, None),
        ],
        [],
    ),
    "XEvent": (
        [
            ("metadata_id", 1, _T.TYPE_INT64, OPT, None, None),
            ("offset_ps", 2, _T.TYPE_INT64, OPT, None, 0),
            ("duration_ps", 3, _T.TYPE_INT64, OPT, None, None),
            ("stats", 4, _T.TYPE_MESSAGE, REP, "XStat", None),
            ("num_occurrences", 5, _T.TYPE_INT64, OPT, None, 0),
        ],
        ["data"],
    ),
    "XStat": (
        [
            ("metadata_id", 1, _T.TYPE_INT64, OPT, None, None),
            ("double_value", 2, _T.TYPE_DOUBLE, OPT, None, 0),
            ("uint64_value", 3, _T.TYPE_UINT64, OPT, None, 0),
            ("int64_value", 4, _T.TYPE_INT64, OPT, None, 0),
            ("str_value", 5, _T.TYPE_BYTES, OPT, None, 0),
            ("bytes_value", 6, _T.TYPE_BYTES, OPT, None, 0),
            ("ref_value", 7, _T.TYPE_UINT64, OPT, None, 0),
        ],
        ["value"],
    ),
    "XEventMetadata": (
        [
            ("id", 1, _T.TYPE_INT64, OPT, None, None),
            ("name", 2, _T.TYPE_BYTES, OPT, None, None),
            ("metadata", 3, _T.TYPE_BYTES, OPT, None, None),
            ("display_name", 4, _T.TYPE_BYTES, OPT, None, None),
            ("stats", 5, _T.TYPE_MESSAGE, REP, "XStat", None),
            ("child_id", 6, _T.TYPE_INT64, REP, None, None),
        ],
        [],
    ),
    "XStatMetadata": (
        [
            ("id", 1, _T.TYPE_INT64, OPT, None, None),
            ("name", 2, _T.TYPE_BYTES, OPT, None, None),
            ("description", 3, _T.TYPE_BYTES, OPT, None, None),
        ],
        [],
    ),
    # tsl/profiler/protobuf/profiler_options.proto (package tensorflow); jax records it
    # serialized in the /host:metadata plane's `profile_options` stat. Field numbers
    # checked against captures made with known options (tests/test_proto.py).
    "ProfileOptions": (
        [
            ("include_dataset_ops", 1, _T.TYPE_BOOL, OPT, None, None),
            ("host_tracer_level", 2, _T.TYPE_UINT32, OPT, None, None),
            ("device_tracer_level", 3, _T.TYPE_UINT32, OPT, None, None),
            ("python_tracer_level", 4, _T.TYPE_UINT32, OPT, None, None),
            ("version", 5, _T.TYPE_UINT32, OPT, None, None),
            ("device_type", 6, _T.TYPE_INT32, OPT, None, None),
            ("enable_hlo_proto", 7, _T.TYPE_BOOL, OPT, None, None),
            ("start_timestamp_ns", 8, _T.TYPE_UINT64, OPT, None, None),
            ("duration_ms", 9, _T.TYPE_UINT64, OPT, None, None),
            ("repository_path", 10, _T.TYPE_BYTES, OPT, None, None),
        ],
        [],
    ),
}

# Map entry messages are nested types of their map's owner.
_NESTED = {"XPlane.EventMetadataEntry", "XPlane.StatMetadataEntry"}


def _message_proto(name: str) -> descriptor_pb2.DescriptorProto:
    fields, oneofs = SCHEMA[name]
    msg = descriptor_pb2.DescriptorProto(name=name.rsplit(".", 1)[-1])
    for oneof in oneofs:
        msg.oneof_decl.add(name=oneof)
    for fname, number, ftype, label, type_name, oneof_index in fields:
        field = msg.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name is not None:
            field.type_name = f".{PACKAGE}.{type_name}"
        if oneof_index is not None:
            field.oneof_index = oneof_index
    return msg


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="traceinspect/xplane.proto", package=PACKAGE, syntax="proto3"
    )
    for name in SCHEMA:
        if name in _NESTED:
            continue
        msg = _message_proto(name)
        for nested in sorted(_NESTED):
            if nested.startswith(name + "."):
                msg.nested_type.append(_message_proto(nested))
        file_proto.message_type.append(msg)
    # A private pool: never clashes with a real xplane_pb2 another library registered.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return pool


def message_class(name: str) -> Any:
    """The generated message class for ``name`` (e.g. ``"XSpace"``)."""
    descriptor = _pool().FindMessageTypeByName(f"{PACKAGE}.{name}")
    return message_factory.GetMessageClass(descriptor)


def field_numbers() -> dict[str, dict[str, int]]:
    """``{message: {field: number}}``, for tests and documentation."""
    return {msg: {f[0]: f[1] for f in fields} for msg, (fields, _) in SCHEMA.items()}


def decode_profile_options(serialized: str | bytes) -> dict[str, Any] | None:
    """The profiler options a trace records (``profile_options`` stat), or None if unreadable.

    The stat arrives as text decoded with surrogateescape; encoding it back gives the bytes.
    """
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError

    raw = (
        serialized.encode("utf-8", "surrogateescape") if isinstance(serialized, str) else serialized
    )
    try:
        msg = message_class("ProfileOptions").FromString(raw)
    except DecodeError:
        return None
    # Zero is meaningful here (python_tracer_level=0), so show unset fields too: protobuf
    # 5.26 renamed the option (26 dropped the old name; 4.25 knows only it).
    try:
        fields = MessageToDict(
            msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
    except TypeError:
        fields = MessageToDict(  # type: ignore[call-arg]
            msg, preserving_proto_field_name=True, including_default_value_fields=True
        )
    fields.pop("repository_path", None)
    return {k: (int(v) if isinstance(v, str) and v.isdigit() else v) for k, v in fields.items()}
