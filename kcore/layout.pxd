# cimport interface of kcore.layout: where the fields of a record batch / legacy message sit.
# A cpdef enum: the names are C constants to cimporters and ints on the Python module.
# Offsets are from the start of an entry (its base offset field), as in a fetch response.

cpdef enum:
    # ---- every entry (v0/v1 message and v2 batch) starts the same way
    ENTRY_BASE_OFFSET = 0           # int64 base offset (v0/v1: the message's own offset)
    ENTRY_LENGTH = 8                # int32 byte count of the rest of the entry
    LOG_OVERHEAD = 12               # size of those two fields
    ENTRY_MAGIC = 16                # int8: 0, 1 (legacy message) or 2 (RecordBatch)

    # ---- RecordBatch v2 header
    V2_PARTITION_LEADER_EPOCH = 12  # int32
    V2_CRC = 17                     # uint32 CRC32C of everything from V2_ATTRIBUTES on
    V2_ATTRIBUTES = 21              # int16
    V2_LAST_OFFSET_DELTA = 23       # int32
    V2_BASE_TIMESTAMP = 27          # int64
    V2_MAX_TIMESTAMP = 35           # int64
    V2_PRODUCER_ID = 43             # int64
    V2_PRODUCER_EPOCH = 51          # int16
    V2_BASE_SEQUENCE = 53           # int32
    V2_RECORD_COUNT = 57            # int32
    V2_HEADER_SIZE = 61             # bytes before the first record
    MIN_RECORD_BYTES = 7            # length varint + the six one-byte minimum fields

    # ---- legacy message v0/v1
    LEGACY_CRC = 12                 # uint32 CRC32 (IEEE) of everything from the magic on
    LEGACY_ATTRIBUTES = 17          # int8
    LEGACY_TIMESTAMP = 18           # int64, v1 only
    LEGACY_MIN_SIZE = 14            # crc + magic + attributes + key length + value length

    # ---- attribute bits (v2 int16; the codec and timestamp-type bits also in v0/v1)
    ATTR_CODEC_MASK = 0x07
    ATTR_TIMESTAMP_TYPE = 0x08      # set: LogAppendTime
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    ATTR_DELETE_HORIZON = 0x40      # KIP-534: the base timestamp is the delete horizon

    # ---- field values
    TIMESTAMP_NONE = -1             # message format v0 has no timestamp
    TIMESTAMP_CREATE_TIME = 0
    TIMESTAMP_LOG_APPEND_TIME = 1
    CONTROL_ABORT = 0               # control record types (key bytes 2..3)
    CONTROL_COMMIT = 1
    NO_PRODUCER_ID = -1
