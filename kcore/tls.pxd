# cython: language_level=3
"""C interface of kcore.tls: the TLS client context the GIL-free connections use."""


cdef class TlsContext:
    cdef void* ctx                     # SSL_CTX*: trust, client certificate, verification
    cdef readonly bint check_hostname  # the server's certificate must name the host connected to
