"""Recycled malloc blocks for decode arrays (compiled); the C API is in pool.pxd."""

POOL_SLOTS: int        # most blocks held at once
POOL_MAX_TOTAL: int    # most bytes held at once, by default (pool_limits: now)

class CArray:
    """A read-only 1-D buffer (buffer protocol) over a pooled block it owns."""
    def __len__(self) -> int: ...

def pool_stats() -> tuple[int, int]:
    """(blocks, bytes) currently held by the pool (for tests)."""

def pool_reserve(largest_block: int) -> None:
    """Keep freed blocks of up to largest_block bytes, and room for two (limits only grow)."""

def pool_limits() -> tuple[int, int]:
    """(largest block kept, most bytes held) in bytes."""

def pool_clear() -> None:
    """Free every pooled block (the memory goes back to the allocator)."""
