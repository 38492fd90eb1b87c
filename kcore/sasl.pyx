# cython: language_level=3
"""SASL on a kcore.transport connection without the GIL: SaslHandshake + SaslAuthenticate.

The GIL-free pacemaker authenticates its own coordinator connection with these functions, so
a member on a SASL listener keeps heartbeating while the application holds the GIL. The
mechanisms are those the Python client speaks on its own connections, computed in C:

* PLAIN (RFC 4616): ``\\0user\\0password``.
* SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): a random nonce (OpenSSL's RAND_bytes),
  PBKDF2 and HMAC from libcrypto, the server nonce checked to extend ours, 4096 to 16384
  iterations (Kafka's range), and the server's signature verified before the session is used.
* OAUTHBEARER (RFC 7628): the client's initial response built by Python from the token it
  holds (``sasl_creds.oauth_message``); a refusal comes back as a JSON challenge, answered
  with 0x01 so that the broker reports its error.

SaslHandshake is sent at v1 (as the Python client does), SaslAuthenticate at the version the
main client negotiated (0-2); the answer's ``session_lifetime_ms`` (KIP-368) is returned so
the caller can authenticate again before the session ends.

The Python classes (``ScramClient``, the encode/decode functions) expose the same C code
for tests. Passwords and tokens never appear in an error.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset, strlen

from kcore.openssl cimport (
    CRYPTO_memcmp, EVP_DecodeBlock, EVP_Digest, EVP_EncodeBlock, EVP_MD, EVP_sha256, EVP_sha512, HMAC,
    OPENSSL_cleanse, PKCS5_PBKDF2_HMAC, RAND_bytes)
from kcore.transport cimport (
    TP_OK, tp_conn, tp_frame, tp_frame_start, tp_recv_frame, tp_send_all)
from kcore.wbuf cimport wb_finish, wb_i32, wb_init, wb_raw, wb_request_header, wb_str, wb_uvarint, wbuf
from kcore.wire cimport load_be16, load_be32, load_be64, read_sized_ptr, skip_tagged_fields_ptr

from kcore.errors import KafkaError

__all__ = ["ScramClient", "SaslAuthenticationError", "MECHANISMS", "MAX_SASL_AUTHENTICATE_VERSION",
           "encode_sasl_handshake_request", "decode_sasl_handshake_response", "encode_sasl_authenticate_request",
           "decode_sasl_authenticate_response"]

MAX_SASL_AUTHENTICATE_VERSION = 2
MECHANISMS = {"PLAIN": SASL_PLAIN, "SCRAM-SHA-256": SASL_SCRAM_SHA_256, "SCRAM-SHA-512": SASL_SCRAM_SHA_512,
              "OAUTHBEARER": SASL_OAUTHBEARER}

cdef enum:
    _SASL_HANDSHAKE = 17
    _SASL_AUTHENTICATE = 36
    _MIN_ITERATIONS = 4096
    _MAX_ITERATIONS = 16384


class SaslAuthenticationError(KafkaError):
    """A SASL exchange failed (the message names the mechanism and why, never a secret)."""


# ---------------------------------------------------------------- credentials
cdef char* _dup_n(const char* p, Py_ssize_t n) noexcept nogil:
    cdef char* q
    if p == NULL or n < 0:
        return NULL
    q = <char*>malloc(n + 1)
    if q != NULL:
        memcpy(q, p, n)
        q[n] = 0
    return q


cdef int sasl_creds_copy(sasl_creds* dst, const sasl_creds* src) noexcept nogil:
    """dst = a deep copy of src: 0, or -1 out of memory (dst cleared)."""
    memset(dst, 0, sizeof(sasl_creds))
    dst.mechanism = src.mechanism
    dst.authenticate_version = src.authenticate_version
    dst.username_len = src.username_len
    dst.password_len = src.password_len
    dst.oauth_message_len = src.oauth_message_len
    dst.username = _dup_n(src.username, src.username_len)
    dst.password = _dup_n(src.password, src.password_len)
    dst.oauth_message = _dup_n(src.oauth_message, src.oauth_message_len)
    if ((src.username != NULL and dst.username == NULL) or (src.password != NULL and dst.password == NULL)
            or (src.oauth_message != NULL and dst.oauth_message == NULL)):
        sasl_creds_clear(dst)
        return -1
    return 0


cdef void _wipe(char** p, Py_ssize_t* n) noexcept nogil:
    if p[0] != NULL:
        OPENSSL_cleanse(p[0], <size_t>(n[0] if n[0] > 0 else 0))
        free(p[0])
    p[0] = NULL
    n[0] = 0


cdef void sasl_creds_clear(sasl_creds* c) noexcept nogil:
    """Wipe and free the strings (the mechanism and version stay)."""
    _wipe(&c.username, &c.username_len)
    _wipe(&c.password, &c.password_len)
    _wipe(&c.oauth_message, &c.oauth_message_len)


cdef void sasl_creds_clear_message(sasl_creds* c) noexcept nogil:
    """Wipe and free the OAUTHBEARER message only (a new token replaces it)."""
    _wipe(&c.oauth_message, &c.oauth_message_len)


# ---------------------------------------------------------------- SCRAM (RFC 5802)
cdef inline const EVP_MD* _md(sasl_scram* s) noexcept nogil:
    return EVP_sha512() if s.sha512 else EVP_sha256()


cdef inline int _hash_len(sasl_scram* s) noexcept nogil:
    return 64 if s.sha512 else 32


cdef Py_ssize_t sasl_scram_first(sasl_scram* s, const char* user, Py_ssize_t user_len,
                                 uint8_t* out, Py_ssize_t cap) noexcept nogil:
    """The client-first message ``n,,n=<user>,r=<nonce>`` into out: its length, or a
    SASL_E_* code. A nonce already in s (tests) is used, else 24 random bytes in base64."""
    cdef uint8_t raw[24]
    cdef Py_ssize_t k, n = 0
    cdef char ch
    if s.nonce_len == 0:
        if RAND_bytes(raw, 24) != 1:
            return SASL_E_CRYPTO
        s.nonce_len = EVP_EncodeBlock(<unsigned char*>s.nonce, raw, 24)
        OPENSSL_cleanse(raw, 24)
    # client-first-bare: n=saslname (',' and '=' escaped),r=nonce
    s.first_bare[0] = 110
    s.first_bare[1] = 61
    n = 2
    for k in range(user_len):
        ch = user[k]
        if n + 3 + 3 + s.nonce_len >= SASL_FIRST_BARE_MAX:
            return SASL_E_OVERFLOW
        if ch == c',':
            memcpy(s.first_bare + n, b"=2C", 3)
            n += 3
        elif ch == c'=':
            memcpy(s.first_bare + n, b"=3D", 3)
            n += 3
        else:
            s.first_bare[n] = ch
            n += 1
    memcpy(s.first_bare + n, b",r=", 3)
    n += 3
    memcpy(s.first_bare + n, s.nonce, s.nonce_len)
    n += s.nonce_len
    s.first_bare_len = <int>n
    if n + 3 > cap:
        return SASL_E_OVERFLOW
    memcpy(out, b"n,,", 3)
    memcpy(out + 3, s.first_bare, n)
    s.state = 1
    return n + 3


cdef int _attr(const uint8_t* p, Py_ssize_t n, int name, const uint8_t** value, Py_ssize_t* value_len) noexcept nogil:
    """The value of attribute ``name=`` in a comma-separated SCRAM message: 1 found, 0 not."""
    cdef Py_ssize_t i = 0, j
    while i < n:
        j = i
        while j < n and p[j] != c',':
            j += 1
        if j - i >= 2 and p[i] == <uint8_t>name and p[i + 1] == c'=':
            value[0] = p + i + 2
            value_len[0] = j - i - 2
            return 1
        i = j + 1
    return 0


cdef int _server_error(const uint8_t* p, Py_ssize_t n, char* why, size_t why_cap) noexcept nogil:
    cdef const uint8_t* v
    cdef Py_ssize_t vn
    if _attr(p, n, c'e', &v, &vn):
        snprintf(why, why_cap, "the broker said %.*s", <int>(vn if vn < 100 else 100), <const char*>v)
        return 1
    return 0


cdef int _b64_decode(const uint8_t* src, Py_ssize_t n, uint8_t* out, Py_ssize_t cap) noexcept nogil:
    """Decoded length, or -1 (not base64, or longer than cap)."""
    cdef int k, pad = 0
    cdef Py_ssize_t i
    if n <= 0 or n % 4 != 0 or n // 4 * 3 > cap:
        return -1
    for i in range(n):
        if not ((c'A' <= src[i] <= c'Z') or (c'a' <= src[i] <= c'z') or (c'0' <= src[i] <= c'9')
                or src[i] == c'+' or src[i] == c'/' or (src[i] == c'=' and i >= n - 2)):
            return -1
    if src[n - 1] == c'=':
        pad += 1
        if src[n - 2] == c'=':
            pad += 1
    elif src[n - 2] == c'=':
        return -1
    k = EVP_DecodeBlock(out, src, <int>n)
    if k < 0:
        return -1
    return k - pad


cdef Py_ssize_t sasl_scram_final(sasl_scram* s, const char* password, Py_ssize_t password_len,
                                 const uint8_t* server_first, Py_ssize_t n, uint8_t* out, Py_ssize_t cap,
                                 char* why, size_t why_cap) noexcept nogil:
    """The client-final message for the broker's server-first into out: its length, or a
    SASL_E_* code (why says what was wrong)."""
    cdef const uint8_t* r
    cdef const uint8_t* salt64
    cdef const uint8_t* it
    cdef Py_ssize_t rn, sn, itn, k, am_len, final_len, digits
    cdef uint8_t salt[256]
    cdef uint8_t salted[64]
    cdef uint8_t client_key[64]
    cdef uint8_t stored_key[64]
    cdef uint8_t signature[64]
    cdef uint8_t server_key[64]
    cdef uint8_t proof[64]
    cdef unsigned int md_len
    cdef int salt_len, hl = _hash_len(s)
    cdef int64_t count = 0
    cdef uint8_t* am
    cdef Py_ssize_t result = SASL_OK
    if why_cap:
        why[0] = 0
    if s.state != 1:
        return SASL_E_STATE
    if _server_error(server_first, n, why, why_cap):
        return SASL_E_SERVER
    if not (_attr(server_first, n, c'r', &r, &rn) and _attr(server_first, n, c's', &salt64, &sn)
            and _attr(server_first, n, c'i', &it, &itn)):
        snprintf(why, why_cap, "malformed server-first message")
        return SASL_E_MALFORMED
    if rn <= s.nonce_len or memcmp_(r, <const uint8_t*>s.nonce, s.nonce_len) != 0:
        snprintf(why, why_cap, "the broker's nonce does not extend ours")
        return SASL_E_NONCE
    for k in range(rn):
        if r[k] < 0x21 or r[k] > 0x7e:
            snprintf(why, why_cap, "malformed server-first message")
            return SASL_E_MALFORMED
    if itn == 0:
        snprintf(why, why_cap, "malformed server-first message")
        return SASL_E_MALFORMED
    digits = 0
    for k in range(itn):
        if it[k] < c'0' or it[k] > c'9':
            snprintf(why, why_cap, "malformed server-first message")
            return SASL_E_MALFORMED
        if count <= _MAX_ITERATIONS:
            count = count * 10 + (it[k] - c'0')
    if count < _MIN_ITERATIONS or count > _MAX_ITERATIONS:
        snprintf(why, why_cap, "the broker asked for an iteration count outside [%d, %d]", _MIN_ITERATIONS,
                 _MAX_ITERATIONS)
        return SASL_E_ITERATIONS
    salt_len = _b64_decode(salt64, sn, salt, sizeof(salt))
    if salt_len < 0:
        snprintf(why, why_cap, "the broker's salt is not base64")
        return SASL_E_MALFORMED
    # client-final-without-proof: c=biws,r=<nonce>; AuthMessage = first-bare,server-first,that
    am_len = s.first_bare_len + 1 + n + 1 + 9 + rn
    am = <uint8_t*>malloc(am_len)
    if am == NULL:
        return SASL_E_CRYPTO
    k = 0
    memcpy(am, s.first_bare, s.first_bare_len)
    k += s.first_bare_len
    am[k] = 44
    k += 1
    memcpy(am + k, server_first, n)
    k += n
    am[k] = 44
    k += 1
    memcpy(am + k, b"c=biws,r=", 9)
    k += 9
    memcpy(am + k, r, rn)
    try:
        if PKCS5_PBKDF2_HMAC(password, <int>password_len, salt, salt_len, <int>count, _md(s), hl, salted) != 1:
            result = SASL_E_CRYPTO
        elif (HMAC(_md(s), salted, hl, <const unsigned char*>b"Client Key", 10, client_key, &md_len) == NULL
              or EVP_Digest(client_key, hl, stored_key, &md_len, _md(s), NULL) != 1
              or HMAC(_md(s), stored_key, hl, am, am_len, signature, &md_len) == NULL
              or HMAC(_md(s), salted, hl, <const unsigned char*>b"Server Key", 10, server_key, &md_len) == NULL
              or HMAC(_md(s), server_key, hl, am, am_len, s.server_signature, &md_len) == NULL):
            result = SASL_E_CRYPTO
        else:
            for k in range(hl):
                proof[k] = client_key[k] ^ signature[k]
            final_len = 9 + rn + 3 + (hl + 2) // 3 * 4
            if final_len + 1 > cap:
                result = SASL_E_OVERFLOW
            else:
                memcpy(out, b"c=biws,r=", 9)
                memcpy(out + 9, r, rn)
                memcpy(out + 9 + rn, b",p=", 3)
                EVP_EncodeBlock(out + 12 + rn, proof, hl)
                result = final_len
                s.state = 2
    finally:
        free(am)
        OPENSSL_cleanse(salted, 64)
        OPENSSL_cleanse(client_key, 64)
        OPENSSL_cleanse(stored_key, 64)
        OPENSSL_cleanse(server_key, 64)
    if result == SASL_E_CRYPTO:
        snprintf(why, why_cap, "OpenSSL could not compute the proof")
    elif result == SASL_E_OVERFLOW:
        snprintf(why, why_cap, "the client-final message does not fit")
    return result


cdef inline int memcmp_(const uint8_t* a, const uint8_t* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if a[k] != b[k]:
            return 1
    return 0


cdef int sasl_scram_verify(sasl_scram* s, const uint8_t* server_final, Py_ssize_t n,
                           char* why, size_t why_cap) noexcept nogil:
    """SASL_OK when the broker's server-final carries the signature only a server that knows
    the password can compute, else a SASL_E_* code."""
    cdef const uint8_t* v
    cdef Py_ssize_t vn
    cdef uint8_t sig[96]
    cdef int k
    if s.state != 2:
        return SASL_E_STATE
    if _server_error(server_final, n, why, why_cap):
        return SASL_E_SERVER
    if not _attr(server_final, n, c'v', &v, &vn):
        snprintf(why, why_cap, "the broker's final message carries no signature")
        return SASL_E_MALFORMED
    k = _b64_decode(v, vn, sig, sizeof(sig))
    if k != _hash_len(s) or CRYPTO_memcmp(sig, s.server_signature, k) != 0:
        snprintf(why, why_cap, "the broker's signature is wrong: it does not know the password "
                 "(a server impersonating the broker?)")
        return SASL_E_SIGNATURE
    s.state = 3
    return SASL_OK


# ---------------------------------------------------------------- requests and responses
cdef Py_ssize_t sasl_encode_handshake(uint8_t* out, Py_ssize_t cap, int32_t correlation_id,
                                      const char* client_id, Py_ssize_t client_id_len,
                                      const char* mechanism) noexcept nogil:
    """SaslHandshake v1 {mechanism} with its size prefix: the length, or SASL_E_OVERFLOW."""
    cdef wbuf b
    if client_id_len > 32767:
        return SASL_E_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _SASL_HANDSHAKE, 1, correlation_id, client_id, client_id_len, False)
    wb_str(&b, mechanism, strlen(mechanism), False)
    return wb_finish(&b, SASL_E_OVERFLOW)


cdef int sasl_decode_handshake_response(const uint8_t* p, Py_ssize_t n, int32_t* correlation_id,
                                        int* error_code) noexcept nogil:
    """Correlation id and error code of a SaslHandshake v0/v1 answer (the mechanisms it
    offers are not needed)."""
    if n < 6:
        return SASL_E_MALFORMED
    correlation_id[0] = <int32_t>load_be32(p)
    error_code[0] = <int16_t>load_be16(p + 4)
    return SASL_OK


cdef Py_ssize_t sasl_encode_authenticate(uint8_t* out, Py_ssize_t cap, int version, int32_t correlation_id,
                                         const char* client_id, Py_ssize_t client_id_len,
                                         const uint8_t* auth, Py_ssize_t auth_len) noexcept nogil:
    """SaslAuthenticate v0-2 {auth_bytes} with its size prefix: the length, or a SASL_E_* code."""
    cdef wbuf b
    cdef bint flex = version >= 2
    if version < 0 or version > 2:
        return SASL_E_STATE
    if client_id_len > 32767 or auth_len > INT32_MAX - 1:
        return SASL_E_OVERFLOW
    wb_init(&b, out, cap)
    wb_request_header(&b, _SASL_AUTHENTICATE, version, correlation_id, client_id, client_id_len, flex)
    if flex:
        wb_uvarint(&b, <uint32_t>(auth_len + 1))
    else:
        wb_i32(&b, <int32_t>auth_len)
    wb_raw(&b, auth, auth_len)
    if flex:
        wb_uvarint(&b, 0)
    return wb_finish(&b, SASL_E_OVERFLOW)


cdef int sasl_decode_authenticate_response(const uint8_t* p, Py_ssize_t n, int version, int32_t* correlation_id,
                                           int* error_code, const uint8_t** message, Py_ssize_t* message_len,
                                           const uint8_t** auth, Py_ssize_t* auth_len,
                                           int64_t* session_lifetime_ms) noexcept nogil:
    """A SaslAuthenticate v0-2 answer (frame without its size prefix): pointers into p for the
    error message (length -1: null) and the auth bytes. SASL_OK or SASL_E_MALFORMED."""
    cdef const uint8_t* end = p + n
    cdef bint flex = version >= 2
    cdef uint32_t u
    cdef int k
    session_lifetime_ms[0] = 0
    if n < 6:
        return SASL_E_MALFORMED
    correlation_id[0] = <int32_t>load_be32(p)
    p += 4
    if flex and skip_tagged_fields_ptr(&p, end, SASL_E_MALFORMED, SASL_E_MALFORMED) != SASL_OK:  # response header v1
        return SASL_E_MALFORMED
    if end - p < 2:
        return SASL_E_MALFORMED
    error_code[0] = <int16_t>load_be16(p)
    p += 2
    if read_sized_ptr(&p, end, flex, 2, True, message, message_len, SASL_E_MALFORMED, SASL_E_MALFORMED) != SASL_OK:
        return SASL_E_MALFORMED
    if read_sized_ptr(&p, end, flex, 4, False, auth, auth_len, SASL_E_MALFORMED, SASL_E_MALFORMED) != SASL_OK:
        return SASL_E_MALFORMED
    if version >= 1:
        if end - p < 8:
            return SASL_E_MALFORMED
        session_lifetime_ms[0] = <int64_t>load_be64(p)
        p += 8
    if flex and skip_tagged_fields_ptr(&p, end, SASL_E_MALFORMED, SASL_E_MALFORMED) != SASL_OK:
        return SASL_E_MALFORMED
    return SASL_OK


# ---------------------------------------------------------------- the exchange
cdef const char* _mechanism_name(int m) noexcept nogil:
    if m == SASL_PLAIN:
        return "PLAIN"
    if m == SASL_SCRAM_SHA_256:
        return "SCRAM-SHA-256"
    if m == SASL_SCRAM_SHA_512:
        return "SCRAM-SHA-512"
    if m == SASL_OAUTHBEARER:
        return "OAUTHBEARER"
    return ""


cdef int _round_trip(tp_conn* c, uint8_t* sbuf, Py_ssize_t n, uint8_t* rbuf, Py_ssize_t rcap,
                     int64_t deadline_ms, Py_ssize_t* rn) noexcept nogil:
    cdef tp_frame f
    cdef int rc = tp_send_all(c, sbuf, n, deadline_ms)
    OPENSSL_cleanse(sbuf, <size_t>n)      # it may have carried a password or a token
    if rc != TP_OK:
        return rc
    tp_frame_start(&f)
    rc = tp_recv_frame(c, &f, rbuf, rcap, deadline_ms, -1)
    if rc == TP_OK:
        rn[0] = f.size
    return rc


cdef int sasl_authenticate(tp_conn* c, const sasl_creds* cr, const char* client_id, Py_ssize_t client_id_len,
                           uint8_t* sbuf, Py_ssize_t scap, uint8_t* rbuf, Py_ssize_t rcap, int32_t* corr,
                           int64_t deadline_ms, int64_t* session_lifetime_ms,
                           char* why, size_t why_cap) noexcept nogil:
    """Authenticate c (connected, TLS established if any) with cr by deadline_ms, using sbuf
    and rbuf; corr is advanced per request. SASL_OK (session_lifetime_ms: the broker's bound
    on the session, 0 for none), a TP_* I/O code, or a SASL_E_* code with why filled in."""
    cdef sasl_scram scram
    cdef Py_ssize_t n, rn = 0, msg_len, auth_len, first_len
    cdef int32_t rcorr
    cdef int rc, code, version = cr.authenticate_version, step = 0
    cdef const uint8_t* msg
    cdef const uint8_t* auth
    cdef uint8_t* first
    cdef const char* name = _mechanism_name(cr.mechanism)
    memset(&scram, 0, sizeof(scram))
    scram.sha512 = cr.mechanism == SASL_SCRAM_SHA_512
    session_lifetime_ms[0] = 0
    if why_cap:
        why[0] = 0
    corr[0] += 1
    n = sasl_encode_handshake(sbuf, scap, corr[0], client_id, client_id_len, name)
    if n < 0:
        return <int>n
    rc = _round_trip(c, sbuf, n, rbuf, rcap, deadline_ms, &rn)
    if rc != TP_OK:
        return rc
    if sasl_decode_handshake_response(rbuf, rn, &rcorr, &code) != SASL_OK or rcorr != corr[0]:
        snprintf(why, why_cap, "malformed SaslHandshake answer")
        return SASL_E_MALFORMED
    if code != 0:
        snprintf(why, why_cap, "the broker refused SASL mechanism %s (error %d)", name, code)
        return SASL_E_MECHANISM
    # The first message is built in the send buffer behind room for the request header.
    first = sbuf + 4 + 2 + 2 + 4 + 2 + (client_id_len if client_id_len > 0 else 0) + 1 + 5
    first_len = scap - (first - sbuf) - 8
    if cr.mechanism == SASL_PLAIN:
        n = 1 + cr.username_len + 1 + cr.password_len
        if n > first_len:
            return SASL_E_OVERFLOW
        first[0] = 0
        memcpy(first + 1, cr.username, cr.username_len)
        first[1 + cr.username_len] = 0
        memcpy(first + 2 + cr.username_len, cr.password, cr.password_len)
    elif cr.mechanism == SASL_OAUTHBEARER:
        n = cr.oauth_message_len
        if n > first_len or cr.oauth_message == NULL:
            snprintf(why, why_cap, "OAUTHBEARER: no token")
            return SASL_E_STATE
        memcpy(first, cr.oauth_message, n)
    else:
        n = sasl_scram_first(&scram, cr.username, cr.username_len, first, first_len)
        if n < 0:
            snprintf(why, why_cap, "%s: the client-first message cannot be built", name)
            return <int>n
    while True:
        # Encoding moves the message into place behind the header (memmove semantics: the
        # message sits later in the buffer than where it is copied to only when header < gap).
        rc = _send_authenticate(c, sbuf, scap, first, n, version, corr, client_id, client_id_len)
        if rc < 0:
            return rc
        rc = _round_trip(c, sbuf, rc, rbuf, rcap, deadline_ms, &rn)
        if rc != TP_OK:
            return rc
        if sasl_decode_authenticate_response(rbuf, rn, version, &rcorr, &code, &msg, &msg_len, &auth, &auth_len,
                                             session_lifetime_ms) != SASL_OK:
            snprintf(why, why_cap, "malformed SaslAuthenticate answer")
            return SASL_E_MALFORMED
        if rcorr != corr[0]:
            return SASL_E_CORRELATION
        if code != 0:
            if msg_len > 0:
                snprintf(why, why_cap, "%s authentication failed: %.*s", name, <int>(msg_len if msg_len < 160 else 160),
                         <const char*>msg)
            else:
                snprintf(why, why_cap, "%s authentication failed (error %d)", name, code)
            return SASL_E_REFUSED
        step += 1
        if cr.mechanism == SASL_PLAIN:
            return SASL_OK
        if cr.mechanism == SASL_OAUTHBEARER:
            if auth_len <= 0 or step > 1:
                return SASL_OK if auth_len <= 0 else SASL_E_REFUSED
            first[0] = 1        # the broker's JSON error: answer 0x01, it then reports the error
            n = 1
            continue
        if scram.state == 1:
            n = sasl_scram_final(&scram, cr.password, cr.password_len, auth, auth_len, first, first_len, why, why_cap)
            if n < 0:
                return <int>n
            continue
        rc = sasl_scram_verify(&scram, auth, auth_len, why, why_cap)
        return rc


cdef int _send_authenticate(tp_conn* c, uint8_t* sbuf, Py_ssize_t scap, uint8_t* msg, Py_ssize_t n, int version,
                            int32_t* corr, const char* client_id, Py_ssize_t client_id_len) noexcept nogil:
    """Encode SaslAuthenticate around msg (which lies inside sbuf): the frame's length in
    sbuf, or a negative code."""
    cdef uint8_t* copy = <uint8_t*>malloc(n if n > 0 else 1)
    cdef Py_ssize_t k
    if copy == NULL:
        return SASL_E_CRYPTO
    memcpy(copy, msg, n)
    corr[0] += 1
    k = sasl_encode_authenticate(sbuf, scap, version, corr[0], client_id, client_id_len, copy, n)
    OPENSSL_cleanse(copy, n)
    free(copy)
    return <int>k


# ---------------------------------------------------------------- Python level (tests, tools)
cdef bytes _b(object v, str what):
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise TypeError(f"{what} must be str or bytes")


cdef class ScramClient:
    """The C SCRAM client with the interface of a SASL mechanism object: ``first()``,
    then ``step(challenge)`` until ``complete``. ``nonce`` (tests): the client nonce to use
    instead of a random one."""

    cdef sasl_scram s
    cdef bytes _user
    cdef bytes _password
    cdef readonly str name
    cdef readonly bint complete

    def __init__(self, mechanism, username, password, nonce=None):
        if mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"not a SCRAM mechanism: {mechanism!r}")
        memset(&self.s, 0, sizeof(self.s))
        self.s.sha512 = mechanism == "SCRAM-SHA-512"
        self.name = mechanism
        self._user = _b(username, "username")
        self._password = _b(password, "password")
        if nonce is not None:
            n = _b(nonce, "nonce")
            if not 0 < len(n) < SASL_NONCE_MAX or b"," in n:
                raise ValueError("the nonce must be 1-63 printable bytes without a comma")
            memcpy(self.s.nonce, PyBytes_AS_STRING(n), len(n))
            self.s.nonce_len = <int>len(n)

    def first(self):
        cdef uint8_t out[1300]
        cdef Py_ssize_t n = sasl_scram_first(&self.s, PyBytes_AS_STRING(self._user), len(self._user), out, sizeof(out))
        if n < 0:
            raise SaslAuthenticationError(f"{self.name}: the user name is too long")
        return PyBytes_FromStringAndSize(<char*>out, n)

    def step(self, challenge):
        cdef bytes ch = _b(challenge, "challenge")
        cdef char why[256]
        cdef uint8_t out[512]
        cdef Py_ssize_t n
        cdef int rc
        why[0] = 0
        if self.s.state == 1:
            n = sasl_scram_final(&self.s, PyBytes_AS_STRING(self._password), len(self._password),
                                 <const uint8_t*>PyBytes_AS_STRING(ch), len(ch), out, sizeof(out), why, sizeof(why))
            if n < 0:
                raise SaslAuthenticationError(f"{self.name}: {why.decode('utf-8', 'replace') or n}")
            return PyBytes_FromStringAndSize(<char*>out, n)
        rc = sasl_scram_verify(&self.s, <const uint8_t*>PyBytes_AS_STRING(ch), len(ch), why, sizeof(why))
        if rc != SASL_OK:
            raise SaslAuthenticationError(f"{self.name}: {why.decode('utf-8', 'replace') or rc}")
        self.complete = True
        return None

    def __repr__(self):
        return f"ScramClient({self.name!r})"


def encode_sasl_handshake_request(int32_t correlation_id, client_id, mechanism):
    """SaslHandshake v1 with its size prefix."""
    cdef bytes cid = None if client_id is None else _b(client_id, "client_id")
    cdef bytes mech = _b(mechanism, "mechanism")
    cdef uint8_t out[40000]
    cdef Py_ssize_t n = sasl_encode_handshake(out, sizeof(out), correlation_id,
                                              NULL if cid is None else PyBytes_AS_STRING(cid),
                                              -1 if cid is None else len(cid), PyBytes_AS_STRING(mech))
    if n < 0:
        raise ValueError("the request does not fit")
    return PyBytes_FromStringAndSize(<char*>out, n)


def decode_sasl_handshake_response(frame):
    """(correlation id, error code) of a SaslHandshake answer (frame without its size prefix)."""
    cdef bytes f = _b(frame, "frame")
    cdef int32_t corr
    cdef int code
    if sasl_decode_handshake_response(<const uint8_t*>PyBytes_AS_STRING(f), len(f), &corr, &code) != SASL_OK:
        raise ValueError("malformed SaslHandshake answer")
    return corr, code


def encode_sasl_authenticate_request(int version, int32_t correlation_id, client_id, auth_bytes):
    """SaslAuthenticate v0-2 with its size prefix."""
    cdef bytes cid = None if client_id is None else _b(client_id, "client_id")
    cdef bytes auth = _b(auth_bytes, "auth_bytes")
    cdef Py_ssize_t cap = len(auth) + 40000
    cdef uint8_t* out = <uint8_t*>malloc(cap)
    cdef Py_ssize_t n
    if out == NULL:
        raise MemoryError()
    try:
        n = sasl_encode_authenticate(out, cap, version, correlation_id, NULL if cid is None else PyBytes_AS_STRING(cid),
                                     -1 if cid is None else len(cid), <const uint8_t*>PyBytes_AS_STRING(auth), len(auth))
        if n < 0:
            raise ValueError(f"cannot encode SaslAuthenticate v{version}")
        return PyBytes_FromStringAndSize(<char*>out, n)
    finally:
        free(out)


def decode_sasl_authenticate_response(int version, frame):
    """{correlation_id, error_code, error_message, auth_bytes, session_lifetime_ms} of a
    SaslAuthenticate answer (frame without its size prefix); ValueError if malformed."""
    cdef bytes f = _b(frame, "frame")
    cdef int32_t corr
    cdef int code
    cdef const uint8_t* msg
    cdef const uint8_t* auth
    cdef Py_ssize_t msg_len, auth_len
    cdef int64_t lifetime
    if not 0 <= version <= MAX_SASL_AUTHENTICATE_VERSION:
        raise ValueError(f"SaslAuthenticate v{version} is not spoken here")
    if sasl_decode_authenticate_response(<const uint8_t*>PyBytes_AS_STRING(f), len(f), version, &corr, &code, &msg,
                                         &msg_len, &auth, &auth_len, &lifetime) != SASL_OK:
        raise ValueError("malformed SaslAuthenticate answer")
    return {"correlation_id": corr, "error_code": code,
            "error_message": None if msg_len < 0 else (<char*>msg)[:msg_len].decode("utf-8", "replace"),
            "auth_bytes": (<char*>auth)[:auth_len], "session_lifetime_ms": lifetime}
