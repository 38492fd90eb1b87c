"""Checksums of Kafka record batches (compiled): CRC32C (v2) and CRC32 (legacy v0/v1)."""

CRC32C_HARDWARE: bool           # True when the SSE4.2 crc32 instruction is used

def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C (Castagnoli), continuing from `crc`; chains like zlib.crc32."""
def crc32c_sw(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C through the slicing-by-8 tables (the fallback path)."""
def crc32c_hw(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32C through SSE4.2; RuntimeError when the CPU lacks it."""
def crc32_ieee(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC32 (IEEE 802.3, = zlib.crc32), the checksum of legacy v0/v1 messages."""
