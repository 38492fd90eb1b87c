# cython: language_level=3
"""C interface of kcore.sasl: SASL on a kcore.transport connection, without the GIL.

Results are 0 (SASL_OK), a negative TP_* code of kcore.transport for an I/O failure, or one
of the SASL_E_* codes below (the exchange's ``why`` says more)."""
from libc.stdint cimport int32_t, int64_t, uint8_t

from kcore.transport cimport tp_conn

cdef enum:
    SASL_NONE = 0
    SASL_PLAIN = 1
    SASL_SCRAM_SHA_256 = 2
    SASL_SCRAM_SHA_512 = 3
    SASL_OAUTHBEARER = 4

cdef enum:
    SASL_OK = 0
    SASL_E_MALFORMED = -30     # the broker's message does not parse
    SASL_E_NONCE = -31         # SCRAM: the server nonce does not extend ours
    SASL_E_ITERATIONS = -32    # SCRAM: an iteration count outside [4096, 16384]
    SASL_E_SERVER = -33        # SCRAM: the broker sent e=<error>
    SASL_E_SIGNATURE = -34     # SCRAM: the broker's signature is wrong (it does not know the password)
    SASL_E_CRYPTO = -35        # OpenSSL failed (no randomness, no memory)
    SASL_E_OVERFLOW = -36      # a message does not fit the buffer
    SASL_E_REFUSED = -37       # SaslAuthenticate answered an error code
    SASL_E_MECHANISM = -38     # SaslHandshake refused the mechanism
    SASL_E_STATE = -39         # a step out of order
    SASL_E_CORRELATION = -40   # an answer to another request

    SASL_NONCE_MAX = 64
    SASL_FIRST_BARE_MAX = 1200
    SASL_HASH_MAX = 64

# The credentials of one exchange (the strings malloc'ed; see sasl_creds_copy / _clear).
ctypedef struct sasl_creds:
    int mechanism                  # SASL_*; SASL_NONE: no SASL on this connection
    char* username
    Py_ssize_t username_len
    char* password
    Py_ssize_t password_len
    char* oauth_message            # OAUTHBEARER: the client's initial response (token, extensions)
    Py_ssize_t oauth_message_len
    int authenticate_version       # SaslAuthenticate version negotiated by the main client (0-2)

# SCRAM client state (RFC 5802).
ctypedef struct sasl_scram:
    int sha512
    int state                      # 0 new, 1 client-first sent, 2 client-final sent, 3 done
    char nonce[64]
    int nonce_len
    char first_bare[1200]
    int first_bare_len
    uint8_t server_signature[64]

cdef int sasl_creds_copy(sasl_creds* dst, const sasl_creds* src) noexcept nogil
cdef void sasl_creds_clear(sasl_creds* c) noexcept nogil
cdef void sasl_creds_clear_message(sasl_creds* c) noexcept nogil
cdef Py_ssize_t sasl_scram_first(sasl_scram* s, const char* user, Py_ssize_t user_len,
                                 uint8_t* out, Py_ssize_t cap) noexcept nogil
cdef Py_ssize_t sasl_scram_final(sasl_scram* s, const char* password, Py_ssize_t password_len,
                                 const uint8_t* server_first, Py_ssize_t n, uint8_t* out, Py_ssize_t cap,
                                 char* why, size_t why_cap) noexcept nogil
cdef int sasl_scram_verify(sasl_scram* s, const uint8_t* server_final, Py_ssize_t n,
                           char* why, size_t why_cap) noexcept nogil
cdef Py_ssize_t sasl_encode_handshake(uint8_t* out, Py_ssize_t cap, int32_t correlation_id,
                                      const char* client_id, Py_ssize_t client_id_len,
                                      const char* mechanism) noexcept nogil
cdef int sasl_decode_handshake_response(const uint8_t* p, Py_ssize_t n, int32_t* correlation_id,
                                        int* error_code) noexcept nogil
cdef Py_ssize_t sasl_encode_authenticate(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                         const char* client_id, Py_ssize_t client_id_len,
                                         const uint8_t* auth, Py_ssize_t auth_len) noexcept nogil
cdef int sasl_decode_authenticate_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                           int* error_code, const uint8_t** message, Py_ssize_t* message_len,
                                           const uint8_t** auth, Py_ssize_t* auth_len,
                                           int64_t* session_lifetime_ms) noexcept nogil
cdef int sasl_authenticate(tp_conn* c, const sasl_creds* cr, const char* client_id, Py_ssize_t client_id_len,
                           uint8_t* sbuf, Py_ssize_t scap, uint8_t* rbuf, Py_ssize_t rcap, int32_t* corr,
                           int64_t deadline_ms, int64_t* session_lifetime_ms,
                           char* why, size_t why_cap) noexcept nogil
