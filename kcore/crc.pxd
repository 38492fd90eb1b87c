# cimport interface of kcore.crc: the checksums of record batches.
from libc.stdint cimport uint8_t, uint32_t

# CRC32C (Castagnoli) of p[0:n] continuing from `crc` (0 to start): the v2 batch checksum;
# hardware-accelerated (SSE4.2) when the CPU has it.
cdef uint32_t crc32c_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil
# CRC32 (IEEE 802.3, as zlib.crc32): the legacy v0/v1 message checksum.
cdef uint32_t crc32_ieee_update(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil
