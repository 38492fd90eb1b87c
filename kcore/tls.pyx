# cython: language_level=3
"""The TLS client context of the GIL-free connections (OpenSSL's libssl, from the system).

``TlsContext`` is built once, with the GIL, from PEM material the Python side read from the
client's settings: trusted CAs (a file, a directory, PEM
text, or the system's store), the client certificate chain and key for mTLS, a key password,
a revocation list, a cipher list, and whether the host name is checked. The handshake, reads
and writes then run without the GIL in kcore.transport (``tp_start_tls``), on any thread.

The server's certificate is always verified (TLS 1.2 at least), as Python's
``ssl.PROTOCOL_TLS_CLIENT`` does. No key material or password is kept once loaded into the
context, and none appears in an error.
"""
from libc.string cimport strlen

from kcore.openssl cimport (
    BIO, BIO_free, BIO_new_mem_buf, ERR_clear_error, ERR_error_string_n, ERR_get_error, EVP_PKEY,
    EVP_PKEY_free, PEM_read_bio_PrivateKey, PEM_read_bio_X509, PEM_read_bio_X509_CRL,
    SSL_CTX, SSL_CTX_add1_chain_cert, SSL_CTX_check_private_key, SSL_CTX_free, SSL_CTX_get_cert_store,
    SSL_CTX_load_verify_locations, SSL_CTX_new, SSL_CTX_set_cipher_list, SSL_CTX_set_default_verify_paths,
    SSL_CTX_set_min_proto_version, SSL_CTX_set_mode, SSL_CTX_set_options, SSL_CTX_set_verify,
    SSL_CTX_use_PrivateKey, SSL_CTX_use_certificate, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, SSL_OP_NO_RENEGOTIATION,
    SSL_VERIFY_PEER, TLS1_2_VERSION, TLS_client_method, X509, X509_CRL, X509_CRL_free, X509_STORE,
    X509_STORE_add_cert, X509_STORE_add_crl, X509_STORE_set_flags, X509_V_FLAG_CRL_CHECK, X509_free)

from kcore.errors import KafkaConnectionError

__all__ = ["TlsContext", "TlsHandshakeError", "TlsConfigurationError"]


class TlsHandshakeError(KafkaConnectionError):
    """The TLS handshake with a broker failed (the message says why: an untrusted
    certificate, a host name it does not carry, a refused client certificate, a peer that
    does not speak TLS)."""


class TlsConfigurationError(ValueError):
    """TLS material that cannot be used (the message names which)."""


cdef str _ssl_error(str what):
    cdef char buf[256]
    cdef unsigned long code = ERR_get_error()
    ERR_clear_error()
    if code == 0:
        return what
    ERR_error_string_n(code, buf, sizeof(buf))
    return f"{what}: {buf.decode('utf-8', 'replace')}"


cdef bytes _arg(object value, str what):
    if value is None:
        return None
    b = value.encode() if isinstance(value, str) else bytes(value)
    if b"\0" in b:
        raise TlsConfigurationError(f"{what} must not contain NUL")
    return b


cdef class TlsContext:
    """``TlsContext(cafile=None, capath=None, cadata=None, certchain=None, key=None,
    password=None, check_hostname=True, ciphers=None, crlfile=None)``: PEM text for
    ``cadata`` (CA certificates), ``certchain`` (the client certificate first, then its
    chain) and ``key`` (the client's private key, encrypted with ``password`` or not). With
    no cafile, capath nor cadata the system's store is trusted."""

    def __cinit__(self):
        self.ctx = NULL

    def __init__(self, *, cafile=None, capath=None, cadata=None, certchain=None, key=None, password=None,
                 bint check_hostname=True, ciphers=None, crlfile=None):
        cdef SSL_CTX* ctx
        cdef bytes b_cafile = _arg(cafile, "cafile"), b_capath = _arg(capath, "capath")
        cdef bytes b_ciphers = _arg(ciphers, "ciphers"), b_crl = _arg(crlfile, "crlfile")
        cdef bytes b_pw = _arg(password, "password")
        if self.ctx != NULL:
            raise RuntimeError("TlsContext is already initialised")
        ERR_clear_error()
        ctx = SSL_CTX_new(TLS_client_method())
        if ctx == NULL:
            raise MemoryError(_ssl_error("cannot create an OpenSSL context"))
        self.ctx = ctx
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION)
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL)
        # A write repeated after TP_AGAIN may come from another address (the same bytes).
        SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER)
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION)
        self.check_hostname = check_hostname
        if b_cafile is not None or b_capath is not None:
            if SSL_CTX_load_verify_locations(ctx, NULL if b_cafile is None else <const char*>b_cafile,
                                             NULL if b_capath is None else <const char*>b_capath) != 1:
                raise TlsConfigurationError(_ssl_error(f"cannot load the CA certificates of {cafile or capath!r}"))
        if cadata is not None:
            if _add_cas(SSL_CTX_get_cert_store(ctx), _arg(cadata, "cadata")) == 0:
                raise TlsConfigurationError(_ssl_error("the CA certificate text holds no PEM certificate"))
        if b_cafile is None and b_capath is None and cadata is None:
            if SSL_CTX_set_default_verify_paths(ctx) != 1:
                raise TlsConfigurationError(_ssl_error("cannot load the system's CA certificates"))
        if certchain is not None or key is not None:
            if certchain is None or key is None:
                raise TlsConfigurationError("a client certificate needs both the certificate chain and the key")
            _use_identity(ctx, _arg(certchain, "certchain"), _arg(key, "key"), b_pw)
        if b_crl is not None:
            _add_crls(SSL_CTX_get_cert_store(ctx), b_crl)
        if b_ciphers is not None and SSL_CTX_set_cipher_list(ctx, b_ciphers) != 1:
            raise TlsConfigurationError(_ssl_error(f"no cipher matches {ciphers!r}"))
        ERR_clear_error()

    def __dealloc__(self):
        if self.ctx != NULL:
            SSL_CTX_free(<SSL_CTX*>self.ctx)
            self.ctx = NULL

    def __repr__(self):
        return f"TlsContext(check_hostname={bool(self.check_hostname)})"


cdef BIO* _mem_bio(bytes data) except NULL:
    cdef BIO* bio = BIO_new_mem_buf(<const char*>data, <int>len(data))
    if bio == NULL:
        raise MemoryError()
    return bio


# What to do with each object read from PEM text: 1 if it was taken, 0 if OpenSSL refused it
# (the object is freed either way); n counts the objects before it.
ctypedef void* (*_pem_reader)(BIO* bio) noexcept
ctypedef int (*_pem_taker)(void* target, void* obj, int n) noexcept


cdef void* _read_cert(BIO* bio) noexcept:
    return PEM_read_bio_X509(bio, NULL, NULL, NULL)


cdef void* _read_crl(BIO* bio) noexcept:
    return PEM_read_bio_X509_CRL(bio, NULL, NULL, NULL)


cdef int _trust_cert(void* store, void* cert, int n) noexcept:
    X509_STORE_add_cert(<X509_STORE*>store, <X509*>cert)    # a duplicate is not an error worth failing for
    X509_free(<X509*>cert)
    return 1


cdef int _trust_crl(void* store, void* crl, int n) noexcept:
    X509_STORE_add_crl(<X509_STORE*>store, <X509_CRL*>crl)
    X509_CRL_free(<X509_CRL*>crl)
    return 1


cdef int _use_chain_cert(void* ctx, void* cert, int n) noexcept:
    """The first certificate is the client's own, the others its chain."""
    cdef int ok
    if n == 0:
        ok = SSL_CTX_use_certificate(<SSL_CTX*>ctx, <X509*>cert) == 1
    else:
        ok = SSL_CTX_add1_chain_cert(<SSL_CTX*>ctx, <X509*>cert) == 1
    X509_free(<X509*>cert)
    return ok


cdef int _read_pem(bytes pem, _pem_reader read, _pem_taker take, void* target, str refused) except -1:
    """Hand every object of pem, in order, to take; how many. TlsConfigurationError(refused)
    when one is refused."""
    cdef BIO* bio = _mem_bio(pem)
    cdef void* obj
    cdef int n = 0
    try:
        while True:
            obj = read(bio)
            if obj == NULL:
                break
            if not take(target, obj, n):
                raise TlsConfigurationError(_ssl_error(refused))
            n += 1
    finally:
        BIO_free(bio)
        ERR_clear_error()            # the end of the text reads as "no start line"
    return n


cdef int _add_cas(X509_STORE* store, bytes pem) except -1:
    """Add every certificate of pem to store; how many."""
    return _read_pem(pem, _read_cert, _trust_cert, store, "")


cdef int _add_crls(X509_STORE* store, bytes path) except -1:
    with open(path, "rb") as f:
        data = f.read()
    if _read_pem(data, _read_crl, _trust_crl, store, "") == 0:
        raise TlsConfigurationError(f"the revocation list {path.decode(errors='replace')!r} holds no PEM CRL")
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK)     # the leaf, as VERIFY_CRL_CHECK_LEAF
    return 0


cdef int _use_identity(SSL_CTX* ctx, bytes chain, bytes key, bytes password) except -1:
    """The client certificate (first of chain), its chain, and key (decrypted with password)."""
    cdef BIO* bio
    cdef EVP_PKEY* pkey
    if _read_pem(chain, _read_cert, _use_chain_cert, ctx, "the client certificate cannot be used") == 0:
        raise TlsConfigurationError("the client certificate text holds no PEM certificate")
    bio = _mem_bio(key)
    try:
        # NULL callback, password as the user data: OpenSSL uses it as the passphrase.
        pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, <void*>(<const char*>password) if password else <void*>b"")
    finally:
        BIO_free(bio)
    if pkey == NULL:
        ERR_clear_error()
        raise TlsConfigurationError("the client's private key cannot be read (no PEM key, or a wrong password)")
    try:
        if SSL_CTX_use_PrivateKey(ctx, pkey) != 1 or SSL_CTX_check_private_key(ctx) != 1:
            raise TlsConfigurationError(_ssl_error("the client's private key does not match its certificate"))
    finally:
        EVP_PKEY_free(pkey)
    return 0
