"""ConsumerProtocolSubscription / ConsumerProtocolAssignment: byte vectors, round trips, hostile input."""
import struct

from hypothesis import given, settings, strategies as st
import pytest

from kclient.group.classic_embedded_protocol import (
    HIGHEST_VERSION,
    Assignment,
    Subscription,
    deserialize_assignment,
    deserialize_subscription,
    deserialize_version,
    serialize_assignment,
    serialize_subscription,
)
from kclient.errors import (
    BufferUnderflowError,
    InvalidLengthError,
    ProtocolError,
    UnsupportedVersionError,
)
from kclient.structs import TopicPartition as TP


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", "").replace("|", ""))


# Hand-assembled from the JSON layouts: int16 version, then
# topics: int32 count + (int16 len + utf8)*; user_data: int32 len (-1 null) + bytes;
# owned (v1+): int32 count + (topic, int32 count + int32*)*; generation (v2+): int32;
# rack (v3+): int16 len (-1 null) + utf8.
SUB_TOPICS = "0000 0002 | 0001 61 | 0002 6263"
SUB_USER = "0000 0002 0102"
SUB_OWNED = "0000 0002 | 0001 61 0000 0002 0000 0000 0000 0002 | 0002 6263 0000 0001 0000 0001"
SUB_VECTORS = {
    0: "0000 |" + SUB_TOPICS + "|" + SUB_USER,
    1: "0001 |" + SUB_TOPICS + "|" + SUB_USER + "|" + SUB_OWNED,
    2: "0002 |" + SUB_TOPICS + "|" + SUB_USER + "|" + SUB_OWNED + "| 0000 0007",
    3: "0003 |" + SUB_TOPICS + "|" + SUB_USER + "|" + SUB_OWNED + "| 0000 0007 | 0002 7231",
}
SUB = Subscription(
    topics=["bc", "a"],  # serialized sorted, as Kafka does
    user_data=b"\x01\x02",
    owned_partitions=[TP("bc", 1), TP("a", 2), TP("a", 0)],
    generation_id=7,
    rack_id="r1",
)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_known_bytes(version):
    assert serialize_subscription(SUB, version) == h(SUB_VECTORS[version])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_decodes_known_bytes_with_version_defaults(version):
    sub = deserialize_subscription(h(SUB_VECTORS[version]))
    assert sub.topics == ("a", "bc")
    assert sub.user_data == b"\x01\x02"
    assert sub.owned_partitions == ((TP("a", 0), TP("a", 2), TP("bc", 1)) if version >= 1 else ())
    assert sub.generation_id == (7 if version >= 2 else -1)
    assert sub.rack_id == ("r1" if version >= 3 else None)
    assert deserialize_version(h(SUB_VECTORS[version])) == version


def test_subscription_null_user_data_and_null_rack():
    sub = Subscription(topics=["t"], user_data=None, generation_id=-1, rack_id=None)
    expected = h("0003 | 0000 0001 0001 74 | ffff ffff | 0000 0000 | ffff ffff | ffff")
    assert serialize_subscription(sub) == expected
    back = deserialize_subscription(expected, group_instance_id="static-1")
    assert back.user_data is None and back.rack_id is None and back.generation_id == -1
    assert back.group_instance_id == "static-1"


def test_subscription_empty_rack_reads_as_none():
    data = h("0003 | 0000 0000 | ffff ffff | 0000 0000 | 0000 0003 | 0000")
    assert deserialize_subscription(data).rack_id is None


def test_newer_subscription_version_is_read_with_newest_layout_and_trailing_fields_ignored():
    data = bytearray(h(SUB_VECTORS[3]))
    data[0:2] = struct.pack(">h", 9)
    data += b"\x00\x00\x00\x2a unknown future field"
    sub = deserialize_subscription(bytes(data))
    assert sub.rack_id == "r1" and sub.generation_id == 7 and sub.topics == ("a", "bc")


def test_trailing_bytes_after_older_version_are_ignored():
    sub = deserialize_subscription(h(SUB_VECTORS[0]) + b"\x99\x99")
    assert sub.topics == ("a", "bc") and sub.owned_partitions == ()


def test_encoding_a_newer_version_writes_the_newest_layout():
    assert serialize_subscription(SUB, 7)[2:] == h(SUB_VECTORS[3])[2:]
    assert serialize_subscription(SUB, 7)[:2] == b"\x00\x03"


ASSIGN_V0 = "0000 | 0000 0002 | 0001 74 0000 0002 0000 0000 0000 0001 | 0001 75 0000 0001 0000 0005 | ffff ffff"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_known_bytes(version):
    a = Assignment(partitions=[TP("t", 0), TP("u", 5), TP("t", 1)], user_data=None)
    expected = bytearray(h(ASSIGN_V0))
    expected[0:2] = struct.pack(">h", version)
    assert serialize_assignment(a, version) == bytes(expected)
    back = deserialize_assignment(bytes(expected))
    assert back.partitions == (TP("t", 0), TP("t", 1), TP("u", 5))
    assert back.user_data is None


def test_assignment_with_user_data():
    data = h("0003 | 0000 0000 | 0000 0003 616263")
    assert deserialize_assignment(data) == Assignment(partitions=(), user_data=b"abc")
    assert serialize_assignment(Assignment(user_data=b"abc")) == data


# --------------------------------------------------------------------------- round trips
topic_names = st.text(alphabet="abcxyz._-01", min_size=1, max_size=12)
partitions = st.lists(st.builds(TP, topic_names, st.integers(0, 2**31 - 1)), max_size=20, unique=True)
user_data = st.one_of(st.none(), st.binary(max_size=64))


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(0, HIGHEST_VERSION),
    topics=st.lists(topic_names, max_size=8, unique=True),
    ud=user_data,
    owned=partitions,
    generation=st.integers(-1, 2**31 - 1),
    rack=st.one_of(st.none(), st.text(min_size=1, max_size=10)),
)
def test_subscription_round_trip_at_every_version(version, topics, ud, owned, generation, rack):
    sub = Subscription(topics=topics, user_data=ud, owned_partitions=owned, generation_id=generation, rack_id=rack)
    back = deserialize_subscription(serialize_subscription(sub, version))
    assert back.topics == tuple(sorted(topics))
    assert back.user_data == ud
    assert set(back.owned_partitions) == (set(owned) if version >= 1 else set())
    assert back.generation_id == (generation if version >= 2 else -1)
    assert back.rack_id == (rack if version >= 3 else None)


@settings(max_examples=150, deadline=None)
@given(version=st.integers(0, HIGHEST_VERSION), parts=partitions, ud=user_data)
def test_assignment_round_trip_at_every_version(version, parts, ud):
    back = deserialize_assignment(serialize_assignment(Assignment(parts, ud), version))
    assert sorted(back.partitions) == sorted(parts)
    assert back.user_data == ud


# --------------------------------------------------------------------------- hostile input
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_truncation_of_a_subscription_raises_protocol_error(version):
    data = h(SUB_VECTORS[version])
    for n in range(len(data)):
        with pytest.raises(ProtocolError):
            deserialize_subscription(data[:n])


def test_every_truncation_of_an_assignment_raises_protocol_error():
    data = h(ASSIGN_V0)
    for n in range(len(data)):
        with pytest.raises(ProtocolError):
            deserialize_assignment(data[:n])


def test_empty_assignment_bytes_raise_underflow_naming_the_likely_cause():
    with pytest.raises(BufferUnderflowError, match="assignor"):
        deserialize_assignment(b"")


def test_negative_version_is_unsupported():
    with pytest.raises(UnsupportedVersionError):
        deserialize_subscription(h("ffff 0000 0000 ffff ffff"))
    with pytest.raises(UnsupportedVersionError):
        deserialize_assignment(h("8000 0000 0000 ffff ffff"))
    with pytest.raises(UnsupportedVersionError):
        serialize_subscription(SUB, -1)


@pytest.mark.parametrize(
    "data",
    [
        "0000 | ffff ffff | ffff ffff",                     # negative topic count
        "0000 | 7fff ffff | ffff ffff",                     # count far beyond the data
        "0000 | 0000 0001 | fffe | ffff ffff",              # negative string length
        "0000 | 0000 0001 | ffff | ffff ffff",              # null topic (not nullable)
        "0000 | 0000 0000 | ffff fffe",                     # user_data length -2
        "0001 | 0000 0000 | ffff ffff | 8000 0000",         # negative owned count
        "0001 | 0000 0000 | ffff ffff | 0000 0001 0001 61 ffff ffff",  # negative partition count
        "0001 | 0000 0000 | ffff ffff | 0000 0001 0001 61 1000 0000 0000 0000",  # partition count too big
        "0003 | 0000 0000 | ffff ffff | 0000 0000 | 0000 0001 | fffe",  # rack length -2
    ],
)
def test_bad_lengths_raise_invalid_length(data):
    with pytest.raises(InvalidLengthError):
        deserialize_subscription(h(data))


def test_field_longer_than_the_data_raises_underflow():
    with pytest.raises(BufferUnderflowError):
        deserialize_subscription(h("0000 | 0000 0000 | 7fff ffff 00"))
    with pytest.raises(BufferUnderflowError):
        deserialize_subscription(h("0000 | 0000 0001 | 7fff 61 | ffff ffff"))


def test_invalid_utf8_and_negative_partition_raise_protocol_error():
    with pytest.raises(ProtocolError, match="UTF-8"):
        deserialize_subscription(h("0000 | 0000 0001 | 0002 c328 | ffff ffff"))
    with pytest.raises(ProtocolError, match="negative partition"):
        deserialize_assignment(h("0000 | 0000 0001 | 0001 74 0000 0001 ffff ffff | ffff ffff"))


def test_none_input_raises_underflow():
    with pytest.raises(BufferUnderflowError):
        deserialize_subscription(None)


def test_memoryview_input_is_accepted():
    data = b"xx" + h(SUB_VECTORS[3])
    assert deserialize_subscription(memoryview(data)[2:]).rack_id == "r1"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=80))
def test_random_bytes_decode_or_raise_protocol_error(data):
    for decode in (deserialize_subscription, deserialize_assignment):
        try:
            decode(data)
        except ProtocolError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_valid_encodings_decode_or_raise_protocol_error(data):
    base = bytearray(h(SUB_VECTORS[data.draw(st.integers(0, 3))]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(base) - 1))
        base[i] = data.draw(st.integers(0, 255))
    try:
        deserialize_subscription(bytes(base))
    except ProtocolError:
        pass
