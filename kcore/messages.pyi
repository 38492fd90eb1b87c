"""Typed public API of kcore.messages (compiled): the schema-driven message codec.

See the module docstring (``help(kcore.messages)``) for the encoding/decoding semantics:
defaults, fields a version lacks, tagged fields, nullability and zero-copy records.
"""
from typing import Any, Mapping

from kclient.protocol.schema import Message

_Buffer = bytes | bytearray | memoryview

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

def compile_message(message: Message, version: int) -> Program:
    """Cached per (message, version); UnsupportedVersionError outside valid_versions."""
def encode(message: Message, version: int, body: Mapping[str, Any] | None = None) -> bytes: ...
def decode(message: Message, version: int, data: _Buffer, exact: bool = False) -> dict[str, Any]: ...
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
