# cython: language_level=3
"""The exceptions kcore raises, and their bases.

kcore depends on nothing outside itself, so the classes its modules raise are defined here.
The client's error module re-exports every one of them under the same name (the very same
class objects), adds the rest of the client-side errors and one class per broker error code
(those derive from KafkaError below).

KafkaError carries the Kafka protocol's error-code attributes: ``errno`` (None for errors
with no protocol code), ``retriable``, ``invalid_metadata`` (refresh metadata before a
retry) and ``description``. CorruptRecordError (code 2, CORRUPT_MESSAGE) and
UnsupportedVersionError (code 35, UNSUPPORTED_VERSION) are both raised here and returned by
brokers, so their codes are set here.
"""

__all__ = [
    "KafkaError", "ProtocolError", "BufferUnderflowError", "InvalidLengthError",
    "VarintError", "FrameTooLargeError", "CorrelationIdMismatchError",
    "UnsupportedVersionError", "CorruptRecordError", "CrcMismatchError",
    "UnsupportedCodecError", "DecompressionError", "DecompressionLimitError",
    "InvalidRecordLengthError", "RecordVarintError", "KafkaConnectionError",
    "IllegalStateError", "IllegalArgumentError", "ConfigurationError",
]


class KafkaError(Exception):
    """Base of every error raised by kcore and by the client built on it."""

    errno = None
    retriable = False
    description = ""
    invalid_metadata = False   # the client should refresh metadata before retrying

    def __str__(self):
        msg = Exception.__str__(self)
        if self.errno is not None:
            head = f"[Error {self.errno}] {type(self).__name__}"
            return f"{head}: {msg}" if msg else f"{head}: {self.description}"
        return msg or self.description or type(self).__name__


# --------------------------------------------------------------------------- wire format
class ProtocolError(KafkaError):
    """Bytes from the wire do not follow the Kafka protocol."""


class BufferUnderflowError(ProtocolError):
    """Input ended before a field was complete (truncated frame, batch or field)."""


class InvalidLengthError(ProtocolError):
    """A length or count field is negative where it may not be, or larger than the data or the limit."""


class VarintError(ProtocolError):
    """A varint is longer than its type allows (malformed or hostile input)."""


class FrameTooLargeError(InvalidLengthError):
    """A frame's length prefix exceeds the configured maximum; nothing was allocated."""


class CorrelationIdMismatchError(ProtocolError):
    """A response's correlation id does not match the oldest in-flight request on the connection."""


class UnsupportedVersionError(ProtocolError):
    errno = 35
    description = "The version of API is not supported."


# --------------------------------------------------------------------------- record batches
class CorruptRecordError(KafkaError):
    """A record batch failed validation (CRC mismatch, bad magic, bad lengths)."""
    errno = 2
    description = ("This message has failed its CRC checksum, exceeds the valid size, has a "
                   "null key for a compacted topic, or is otherwise corrupt.")


class CrcMismatchError(CorruptRecordError):
    """The CRC stored in a record batch does not match its content."""


class UnsupportedCodecError(CorruptRecordError):
    """A record batch names a compression codec this client does not know."""


class DecompressionError(CorruptRecordError):
    """Compressed record data could not be decompressed."""


class DecompressionLimitError(DecompressionError):
    """Decompressed data would exceed the configured bound (a decompression bomb)."""


class InvalidRecordLengthError(CorruptRecordError, InvalidLengthError):
    """A length or count inside a record batch is negative or exceeds the bytes around it."""


class RecordVarintError(CorruptRecordError, VarintError):
    """A varint inside a record batch is longer than its type allows."""


# --------------------------------------------------------------------------- connections, usage
class KafkaConnectionError(KafkaError):
    """A connection to a broker failed or was lost; requests on it failed."""
    retriable = True
    invalid_metadata = True


class IllegalStateError(KafkaError):
    """The client was used in a way its state does not allow."""


class IllegalArgumentError(KafkaError, ValueError):
    """A caller passed an invalid argument."""


class ConfigurationError(IllegalArgumentError):
    """A setting is unknown or has an invalid value; the message names the setting."""
