"""Generate kclient/protocol/messages.py from Kafka's public JSON message definitions.

Usage:
    python tools/gen_messages.py JSON_DIR [OUT]      (OUT defaults to kclient/protocol/messages.py)

JSON_DIR holds ``<Name>Request.json`` / ``<Name>Response.json`` as published in Apache Kafka's
``clients/src/main/resources/common/message/``. The definitions are protocol facts; this script
only restates them as ``kclient.protocol.schema`` declarations:

* names go through ``schema.snake``;
* ``commonStructs`` (and structs declared inline once and referenced again) are inlined into
  every field that uses them;
* JSON default strings become Python values ("0x7fffffff" -> 2147483647, "null" -> None,
  "false" -> False, ...);
* a nullable field WITHOUT a JSON default keeps Kafka's non-null default (empty string / list /
  bytes), written out explicitly because ``default=None`` means "null" for a nullable field.
  ``records`` fields default to null, as in Kafka's generated code.

The only input a human chose is API_LIST below (which APIs the product uses).
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kclient.protocol.schema import PRIMITIVES, Versions, snake  # noqa: E402

API_LIST = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics",
    "DeleteRecords", "OffsetForLeaderEpoch", "SaslAuthenticate", "CreatePartitions",
    "ConsumerGroupHeartbeat", "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch",
    "ShareAcknowledge", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
    "DeleteShareGroupOffsets", "DescribeConfigs", "DeleteGroups", "IncrementalAlterConfigs",
    "GetTelemetrySubscriptions", "PushTelemetry",
]

# Highest versions the two test brokers advertise in their ApiVersions response, measured
# (see tests/test_messages_vectors.py and the report): Tansu 0.6.0 and the librdkafka 2.16.0
# mock cluster shipped in confluent-kafka 2.16.1. None = API not offered.
BROKER_MAX = {
    # api key: (tansu, mock)
    0: (11, 10), 1: (17, 16), 2: (9, 7), 3: (12, 13), 8: (9, 9), 9: (9, 6), 10: (6, 3),
    11: (9, 6), 12: (4, 5), 13: (5, 4), 14: (5, 4), 15: (5, None), 16: (5, None),
    17: (1, None), 18: (4, 2), 19: (7, None), 20: (6, None), 21: (2, None), 23: (None, 2), 36: (2, None),
    37: (None, None), 68: (None, 1),
    76: (None, None), 77: (None, None), 78: (None, None), 79: (None, None), 90: (None, None),
    91: (None, None), 92: (None, None),
    32: (4, None), 42: (2, None), 44: (1, None), 71: (0, 0), 72: (None, 0),
}
BROKER_MIN = {23: (None, 2), 68: (None, 1)}  # every other advertised minimum is 0


def strip_comments(text: str) -> str:
    """Drop // line comments outside string literals (Kafka parses these files with comments on)."""
    out = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.loads(strip_comments(f.read()))


def convert_default(ftype: str, text, nullable: str | None):
    """Python value for a JSON default; None in the result means 'null' (or zero if not nullable)."""
    elem = ftype[2:] if ftype.startswith("[]") else ftype
    is_array = ftype.startswith("[]")
    if isinstance(text, bool):  # a few definitions write bare JSON literals
        text = "true" if text else "false"
    elif isinstance(text, (int, float)):
        text = repr(text)
    has_nullable = not Versions.parse(nullable).is_empty()
    if text is None or text == "":
        if not has_nullable:
            # the type's zero value, which is what schema.Field(default=None) means
            return None
        # Kafka's default for a nullable field without an explicit default is NOT null
        if is_array:
            return []
        if ftype == "string":
            return ""
        if ftype == "bytes":
            return b""
        if ftype == "records":
            return None
        if ftype not in PRIMITIVES:
            raise SystemExit(f"nullable struct without default: {ftype}")
        raise SystemExit(f"nullable {ftype} without default")
    if text == "null":
        if not has_nullable:
            raise SystemExit(f"null default on non-nullable {ftype}")
        return None
    if is_array or elem not in PRIMITIVES:
        raise SystemExit(f"unsupported default {text!r} for {ftype}")
    if ftype in ("int8", "int16", "uint16", "int32", "int64"):
        return int(text, 0)
    if ftype == "bool":
        if text not in ("true", "false"):
            raise SystemExit(f"bad bool default {text!r}")
        return text == "true"
    if ftype == "float64":
        return float(text)
    if ftype == "string":
        return text
    raise SystemExit(f"unsupported default {text!r} for {ftype}")


def collect_structs(fields: list, out: dict) -> None:
    for f in fields:
        if "fields" in f:
            name = f["type"][2:] if f["type"].startswith("[]") else f["type"]
            out.setdefault(name, f["fields"])
            collect_structs(f["fields"], out)


KNOWN_KEYS = {
    "name", "type", "versions", "nullableVersions", "taggedVersions", "tag", "default",
    "ignorable", "fields", "about", "entityType", "mapKey", "zeroCopy",
}


def convert_field(f: dict, structs: dict) -> dict:
    unknown = set(f) - KNOWN_KEYS
    if unknown:
        # e.g. a field-level "flexibleVersions": schema.Field cannot express it
        raise SystemExit(f"field {f.get('name')}: unsupported keys {sorted(unknown)}")
    ftype = f["type"]
    elem = ftype[2:] if ftype.startswith("[]") else ftype
    d: dict = {"name": snake(f["name"]), "type": ftype}
    if "versions" not in f:
        raise SystemExit(f"field {f['name']} without versions")
    d["versions"] = f["versions"]
    if f.get("nullableVersions"):
        d["nullable_versions"] = f["nullableVersions"]
    if f.get("taggedVersions"):
        d["tagged_versions"] = f["taggedVersions"]
    if "tag" in f:
        d["tag"] = int(f["tag"])
    if ("tag" in f) != bool(f.get("taggedVersions")):
        raise SystemExit(f"field {f['name']}: tag without taggedVersions or vice versa")
    default = convert_default(ftype, f.get("default"), f.get("nullableVersions"))
    if default is not None:
        d["default"] = default
    if f.get("ignorable"):
        d["ignorable"] = True
    if elem not in PRIMITIVES:
        sub = f.get("fields")
        if sub is None:
            if elem not in structs:
                raise SystemExit(f"struct {elem} not found")
            sub = structs[elem]
        d["fields"] = [convert_field(x, structs) for x in sub]
    elif "fields" in f:
        raise SystemExit(f"primitive {ftype} with fields")
    return d


def convert_message(spec: dict) -> dict:
    structs: dict = {}
    for cs in spec.get("commonStructs", []):
        structs[cs["name"]] = cs["fields"]
    collect_structs(spec["fields"], structs)
    return {
        "api_key": spec["apiKey"],
        "name": spec["name"],
        "kind": spec["type"],
        "valid_versions": spec["validVersions"],
        "flexible_versions": spec.get("flexibleVersions", "none"),
        "fields": [convert_field(f, structs) for f in spec["fields"]],
    }


# ---------------------------------------------------------------------------------------------
# rendering

def render_field(d: dict, indent: int) -> str:
    pad = " " * indent
    args = [repr(d["name"]), repr(d["type"]), repr(d["versions"])]
    for key in ("nullable_versions", "tagged_versions", "tag", "default", "ignorable"):
        if key in d:
            args.append(f"{key}={d[key]!r}")
    head = f"{pad}F({', '.join(args)}"
    if "fields" not in d:
        return head + "),"
    inner = "\n".join(render_field(x, indent + 4) for x in d["fields"])
    return f"{head}, fields=[\n{inner}\n{pad}]),"


def render_message(m: dict, table: str) -> str:
    lines = [
        f"{table}[{m['api_key']}] = Message({m['api_key']}, {m['name']!r}, {m['kind']!r}, "
        f"{m['valid_versions']!r}, {m['flexible_versions']!r}, [",
    ]
    lines += [render_field(f, 4) for f in m["fields"]]
    lines.append("])")
    return "\n".join(lines)


def flexible_floor(flex: str) -> str:
    v = Versions.parse(flex)
    return "none" if v.is_empty() else str(v.low)


def fmt_broker(key: int, idx: int) -> str:
    hi = BROKER_MAX[key][idx]
    if hi is None:
        return "-"
    lo = BROKER_MIN.get(key, (0, 0))[idx] or 0
    return f"{lo}-{hi}"


def render_module(pairs: list, source: str) -> str:
    rows = []
    for name, req, resp in pairs:
        if req["flexible_versions"] != resp["flexible_versions"]:
            raise SystemExit(f"{name}: request/response flexible versions differ")
        if req["valid_versions"] != resp["valid_versions"]:
            # KIP-896 removed old request versions; some response files still list them
            # (OffsetForLeaderEpoch: request 2-4, response 0-4). A client only ever reads
            # responses to the versions it sends: the request's range applies to both.
            rlo, rhi = Versions.parse(req["valid_versions"]).low, Versions.parse(req["valid_versions"]).high
            plo, phi = Versions.parse(resp["valid_versions"]).low, Versions.parse(resp["valid_versions"]).high
            if not (plo <= rlo and rhi == phi):
                raise SystemExit(f"{name}: request/response version ranges differ")
            resp["valid_versions"] = req["valid_versions"]
        k = req["api_key"]
        rows.append(
            f"  {name:<25} {k:>3}  {req['valid_versions']:<8} {flexible_floor(req['flexible_versions']):<8}"
            f" {fmt_broker(k, 0):<7} {fmt_broker(k, 1)}"
        )
    table = "\n".join(rows)
    body = []
    for name, req, resp in pairs:
        body.append(f"# --- {name} ({req['api_key']}) " + "-" * max(0, 80 - len(name) - 12))
        body.append(render_message(req, "REQUESTS"))
        body.append("")
        body.append(render_message(resp, "RESPONSES"))
        body.append("")
    names = ",\n".join(f"    {req['api_key']}: {name!r}" for name, req, _ in pairs)
    return f'''"""Every Kafka protocol message kclient uses, all versions, as data (see schema.py).

GENERATED by tools/gen_messages.py from Apache Kafka's public JSON message definitions
({source});
regenerate rather than edit by hand.
Versions are Kafka's current validVersions (Kafka 4.x, after KIP-896 removed the oldest ones and
later releases restored Metadata v0-v3 and JoinGroup v0-v1).

  API                       key  versions flexible tansu   mock
{table}

"flexible" is the first flexible version (compact strings/arrays, tagged fields, request
header v2, response header v1). tansu / mock: the ranges that Tansu 0.6.0 and the librdkafka
2.16.0 mock cluster (confluent-kafka 2.16.1) advertise in ApiVersions ("-": not offered).
Every declared floor is at or below what both brokers offer where they offer the API.

ApiVersions (18) is special:
  * its response header is always v0 (no tagged fields), even for the flexible v3+ bodies, so
    a client can parse the answer before it knows which versions the broker speaks;
  * a broker that does not support the requested ApiVersions version answers
    UNSUPPORTED_VERSION (35) with api_keys listing at least its own ApiVersions range. Apache
    Kafka writes that answer in v0 form (int32 array length, no throttle_time_ms, no tags).
    The librdkafka mock answers v3+ requests it does not support (its max is 2) with
    error_code, a one-byte raw element count, the (18, 0, 2) entry and an int32 throttle time.

Defaults: ``default=None`` means the type's zero value, or null if the field is nullable in the
version being encoded. Where Kafka's default for a nullable field is NOT null (no JSON
default), the empty value is written out explicitly (``default=""`` / ``default=[]``). Defaults
are shared objects: a codec must copy list defaults before handing them to callers.
"""
from __future__ import annotations

from kclient.protocol.schema import Field as F, Message

__all__ = [
    "REQUESTS", "RESPONSES", "API_NAMES", "request_header_version", "response_header_version",
]

API_NAMES: dict[int, str] = {{
{names},
}}

REQUESTS: dict[int, Message] = {{}}
RESPONSES: dict[int, Message] = {{}}


def request_header_version(api_key: int, version: int) -> int:
    """Request header v2 (tagged fields after client_id) for flexible versions, else v1."""
    return 2 if REQUESTS[api_key].is_flexible(version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """Response header v1 (tagged fields) for flexible versions, except ApiVersions (always v0)."""
    if api_key == 18:
        return 0
    return 1 if RESPONSES[api_key].is_flexible(version) else 0


{chr(10).join(body)}'''


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    src = argv[1]
    out = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(HERE), "kclient", "protocol", "messages.py")
    source = "apache/kafka trunk"
    commit_file = os.path.join(src, "SOURCE")
    if os.path.exists(commit_file):
        with open(commit_file, encoding="utf-8") as f:
            source = f.read().strip()
    pairs = []
    for name in API_LIST:
        req = convert_message(load(os.path.join(src, f"{name}Request.json")))
        resp = convert_message(load(os.path.join(src, f"{name}Response.json")))
        if req["kind"] != "request" or resp["kind"] != "response" or req["api_key"] != resp["api_key"]:
            raise SystemExit(f"{name}: inconsistent request/response pair")
        pairs.append((name, req, resp))
    text = render_module(pairs, source)
    compile(text, out, "exec")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {out}: {len(pairs)} APIs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
