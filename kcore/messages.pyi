"""Typed public API of kcore.messages (compiled): the schema-driven message codec.

See the module docstring (``help(kcore.messages)``) for the encoding/decoding semantics:
defaults, fields a version lacks, tagged fields, nullability and zero-copy records.
"""
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

_Buffer = bytes | bytearray | memoryview

@runtime_checkable
class FieldSpec(Protocol):
    """One field of a message or struct, as compile_message reads it."""

    name: str
    type: str                      # "int32", "[]int32", "[]Name", "Name", ...
    tag: int | None
    default: object                # None: the type's zero value
    # Read-only (a property) so a list of a conforming field class satisfies it.
    @property
    def fields(self) -> Sequence[FieldSpec]: ...   # members of a struct / []struct type
    ignorable: bool
    def in_version(self, v: int) -> bool: ...
    def nullable_in(self, v: int) -> bool: ...
    def tagged_in(self, v: int) -> bool: ...
    @property
    def is_array(self) -> bool: ...
    @property
    def element_type(self) -> str: ...
    @property
    def is_struct(self) -> bool: ...

@runtime_checkable
class MessageSpec(Protocol):
    """A request or response body, as compile_message reads it."""

    name: str
    valid_versions: str
    @property
    def fields(self) -> Sequence[FieldSpec]: ...
    def versions(self) -> range: ...
    def is_flexible(self, v: int) -> bool: ...

class Program:
    """One message body (or struct) at one version, compiled to a flat op array."""

    flexible: bool
    min_size: int
    name: str
    version: int
    @property
    def field_names(self) -> list[str]: ...
    def default(self) -> dict[str, Any]:
        """A fresh dict of every field's default at this version."""
    def decode(self, data: _Buffer, exact: bool = False) -> dict[str, Any]: ...
    def encode(self, body: Mapping[str, Any] | None = None) -> bytes: ...

def compile_message(message: MessageSpec, version: int) -> Program:
    """Cached per (message, version); UnsupportedVersionError outside valid_versions."""
def encode(message: MessageSpec, version: int, body: Mapping[str, Any] | None = None) -> bytes: ...
def decode(message: MessageSpec, version: int, data: _Buffer, exact: bool = False) -> dict[str, Any]: ...
def encode_request_frame(prog: Program, api_key: int, api_version: int, correlation_id: int,
                         client_id: str | None, body: Mapping[str, Any] | None,
                         header_version: int) -> bytes:
    """Size prefix + request header + body."""
def encode_response_frame(prog: Program, correlation_id: int, body: Mapping[str, Any] | None,
                          header_version: int) -> bytes:
    """Size prefix + response header + body."""
def decode_response_frame(prog: Program, frame: _Buffer, header_version: int,
                          exact: bool = False) -> dict[str, Any]:
    """Body of a response frame given without its size prefix."""
def decode_request_frame(prog: Program, frame: _Buffer, header_version: int
                         ) -> tuple[int, int, int, str | None, dict[str, Any]]:
    """(api_key, api_version, correlation_id, client_id, body) of a request frame."""
