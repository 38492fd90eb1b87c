"""kcore: the compiled hot path of kclient (wire format, frames, records, queues, timers).

Every module here is a Cython extension; there is no pure-Python fallback.
"""
