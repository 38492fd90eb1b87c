"""Declarative description of Kafka protocol messages.

The declarations in ``kclient.protocol.messages`` mirror, field for field, the public JSON
message definitions of the Kafka protocol (``common/message/*.json``): the same field names
(converted to snake_case), types, version ranges, nullable/tagged versions and defaults.
The compiled codec in ``kcore.messages`` turns a (Message, version) pair into a flat program
and runs it; nothing here is on the hot path.

Types (as in the JSON definitions):
  "bool", "int8", "int16", "uint16", "int32", "int64", "float64", "uuid",
  "string", "bytes", "records",
  "[]T" for an array of a primitive T, "[]Name" for an array of structs (``fields`` given),
  "Name" for a single nested struct (``fields`` given).
Version ranges: "3+", "0-7", "none" (never), or "" (same as "none").
"""
from __future__ import annotations

from dataclasses import dataclass, field as _dc_field
import re

PRIMITIVES = frozenset({
    "bool", "int8", "int16", "uint16", "int32", "int64", "float64", "uuid",
    "string", "bytes", "records",
})


@dataclass(frozen=True)
class Versions:
    low: int
    high: int | None  # None: open-ended ("3+")

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "" or text == "none":
            return cls(1, 0)  # empty
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-")
            return cls(int(lo), int(hi))
        v = int(text)
        return cls(v, v)

    def __contains__(self, v: int) -> bool:
        return v >= self.low and (self.high is None or v <= self.high)

    def is_empty(self) -> bool:
        return self.high is not None and self.high < self.low


def snake(name: str) -> str:
    """JSON field names are CamelCase; ours are snake_case (``ErrorCode`` -> ``error_code``)."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


@dataclass
class Field:
    name: str                     # snake_case
    type: str                     # see module doc
    versions: str = "0+"
    nullable_versions: str | None = None
    tagged_versions: str | None = None
    tag: int | None = None
    default: object = None        # None: the type's zero value (0, False, "", empty list, null if nullable)
    fields: list["Field"] = _dc_field(default_factory=list)  # for struct and []struct types
    ignorable: bool = False       # may be silently dropped when the version lacks it

    def in_version(self, v: int) -> bool:
        return v in Versions.parse(self.versions)

    def nullable_in(self, v: int) -> bool:
        return v in Versions.parse(self.nullable_versions)

    def tagged_in(self, v: int) -> bool:
        return v in Versions.parse(self.tagged_versions)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in PRIMITIVES


@dataclass
class Message:
    api_key: int
    name: str                     # e.g. "FetchRequest"
    kind: str                     # "request" or "response"
    valid_versions: str           # e.g. "4-17"
    flexible_versions: str        # e.g. "12+"
    fields: list[Field]

    def versions(self) -> range:
        vr = Versions.parse(self.valid_versions)
        return range(vr.low, (vr.high if vr.high is not None else vr.low) + 1)

    def is_flexible(self, v: int) -> bool:
        return v in Versions.parse(self.flexible_versions)
