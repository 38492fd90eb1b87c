# Integer-millisecond helpers shared by kcore.queues and kcore.timers (inline, no module).
from cpython.number cimport PyNumber_Index
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t


cdef inline int64_t as_ms(object x) except? -1:
    # Times are integer milliseconds: a float (e.g. time.monotonic() seconds) is a unit bug,
    # so refuse it instead of letting C conversion truncate it. OverflowError past int64.
    if type(x) is not int:
        x = PyNumber_Index(x)
    return x


# Times come from callers and may be anything in int64 (hostile or fake clocks included):
# saturate instead of wrapping, so a huge "now" can never turn into "not expired".
cdef inline int64_t sat_add(int64_t a, int64_t b) noexcept nogil:
    if b > 0 and a > INT64_MAX - b:
        return INT64_MAX
    if b < 0 and a < INT64_MIN - b:
        return INT64_MIN
    return a + b


cdef inline int64_t sat_sub(int64_t a, int64_t b) noexcept nogil:
    if b < 0 and a > INT64_MAX + b:
        return INT64_MAX
    if b > 0 and a < INT64_MIN + b:
        return INT64_MIN
    return a - b
