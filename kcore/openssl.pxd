# cython: language_level=3
"""OpenSSL's libssl and libcrypto, as the GIL-free connection code uses them (declarations
only, no module). The modules that cimport this are linked with -lssl -lcrypto (setup.py)."""

cdef extern from "<openssl/ssl.h>" nogil:
    ctypedef struct SSL_CTX:
        pass
    ctypedef struct SSL:
        pass
    ctypedef struct SSL_METHOD:
        pass
    ctypedef struct X509:
        pass
    ctypedef struct X509_STORE:
        pass
    ctypedef struct X509_CRL:
        pass
    ctypedef struct X509_VERIFY_PARAM:
        pass
    ctypedef struct EVP_PKEY:
        pass
    ctypedef struct BIO:
        pass
    ctypedef struct BIO_METHOD:
        pass
    ctypedef struct EVP_MD:
        pass

    int SSL_ERROR_NONE, SSL_ERROR_SSL, SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE
    int SSL_ERROR_SYSCALL, SSL_ERROR_ZERO_RETURN
    int SSL_VERIFY_PEER, SSL_VERIFY_NONE
    int TLS1_2_VERSION
    long SSL_MODE_ENABLE_PARTIAL_WRITE, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
    long SSL_OP_NO_RENEGOTIATION
    int X509_V_OK
    unsigned long X509_V_FLAG_CRL_CHECK

    const SSL_METHOD* TLS_client_method()
    SSL_CTX* SSL_CTX_new(const SSL_METHOD*)
    void SSL_CTX_free(SSL_CTX*)
    int SSL_CTX_set_min_proto_version(SSL_CTX*, int)
    void SSL_CTX_set_verify(SSL_CTX*, int, void*)
    int SSL_CTX_load_verify_locations(SSL_CTX*, const char*, const char*)
    int SSL_CTX_set_default_verify_paths(SSL_CTX*)
    X509_STORE* SSL_CTX_get_cert_store(const SSL_CTX*)
    int SSL_CTX_use_certificate(SSL_CTX*, X509*)
    int SSL_CTX_add1_chain_cert(SSL_CTX*, X509*)
    int SSL_CTX_use_PrivateKey(SSL_CTX*, EVP_PKEY*)
    int SSL_CTX_check_private_key(const SSL_CTX*)
    int SSL_CTX_set_cipher_list(SSL_CTX*, const char*)
    long SSL_CTX_set_mode(SSL_CTX*, long)
    long SSL_CTX_set_options(SSL_CTX*, long)
    int SSL_CTX_up_ref(SSL_CTX*)

    SSL* SSL_new(SSL_CTX*)
    void SSL_free(SSL*)
    int SSL_set_fd(SSL*, int)
    int SSL_connect(SSL*)
    int SSL_read(SSL*, void*, int)
    int SSL_write(SSL*, const void*, int)
    int SSL_shutdown(SSL*)
    int SSL_get_error(const SSL*, int)
    int SSL_pending(const SSL*)
    long SSL_set_tlsext_host_name(SSL*, const char*)
    int SSL_set1_host(SSL*, const char*)
    X509_VERIFY_PARAM* SSL_get0_param(SSL*)
    long SSL_get_verify_result(const SSL*)
    const char* SSL_get_version(const SSL*)

    int X509_VERIFY_PARAM_set1_ip_asc(X509_VERIFY_PARAM*, const char*)
    const char* X509_verify_cert_error_string(long)
    int X509_STORE_add_cert(X509_STORE*, X509*)
    int X509_STORE_add_crl(X509_STORE*, X509_CRL*)
    int X509_STORE_set_flags(X509_STORE*, unsigned long)
    void X509_free(X509*)
    void X509_CRL_free(X509_CRL*)
    void EVP_PKEY_free(EVP_PKEY*)

cdef extern from "<openssl/pem.h>" nogil:
    BIO* BIO_new_mem_buf(const void*, int)
    int BIO_free(BIO*)
    X509* PEM_read_bio_X509(BIO*, X509**, void*, void*)
    X509_CRL* PEM_read_bio_X509_CRL(BIO*, X509_CRL**, void*, void*)
    EVP_PKEY* PEM_read_bio_PrivateKey(BIO*, EVP_PKEY**, void*, void*)

cdef extern from "<openssl/err.h>" nogil:
    unsigned long ERR_get_error()
    unsigned long ERR_peek_last_error()
    void ERR_clear_error()
    void ERR_error_string_n(unsigned long, char*, size_t)
    const char* ERR_reason_error_string(unsigned long)
    int ERR_GET_REASON(unsigned long)
    int PEM_R_NO_START_LINE

cdef extern from "<openssl/sslerr.h>" nogil:
    int SSL_R_UNEXPECTED_EOF_WHILE_READING

cdef extern from "<openssl/evp.h>" nogil:
    const EVP_MD* EVP_sha256()
    const EVP_MD* EVP_sha512()
    int EVP_Digest(const void*, size_t, unsigned char*, unsigned int*, const EVP_MD*, void*)
    int PKCS5_PBKDF2_HMAC(const char*, int, const unsigned char*, int, int, const EVP_MD*, int, unsigned char*)
    int EVP_EncodeBlock(unsigned char*, const unsigned char*, int)
    int EVP_DecodeBlock(unsigned char*, const unsigned char*, int)

cdef extern from "<openssl/hmac.h>" nogil:
    unsigned char* HMAC(const EVP_MD*, const void*, int, const unsigned char*, size_t, unsigned char*, unsigned int*)

cdef extern from "<openssl/rand.h>" nogil:
    int RAND_bytes(unsigned char*, int)

cdef extern from "<openssl/crypto.h>" nogil:
    void OPENSSL_cleanse(void*, size_t)
    int CRYPTO_memcmp(const void*, const void*, size_t)
