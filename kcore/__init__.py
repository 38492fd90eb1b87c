"""kcore: the compiled hot path of a Kafka client (wire format, frames, records, queues,
timers). It depends on nothing but itself (and cramjam for compression).

Every module here is a Cython extension; there is no pure-Python fallback.
"""
