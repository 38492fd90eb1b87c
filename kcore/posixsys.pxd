# POSIX threads, clock and socket calls used without the GIL (declarations only, no module).
# Cython ships no posix.pthread / sys.socket declarations, so the few we need live here.
from libc.stdint cimport int64_t

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_mutexattr_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    ctypedef struct pthread_condattr_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, const pthread_mutexattr_t*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_condattr_init(pthread_condattr_t*)
    int pthread_condattr_setclock(pthread_condattr_t*, int)
    int pthread_condattr_destroy(pthread_condattr_t*)
    int pthread_cond_init(pthread_cond_t*, const pthread_condattr_t*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_broadcast(pthread_cond_t*)
    int pthread_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const timespec*)

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int CLOCK_MONOTONIC
    int clock_gettime(int, timespec*)

cdef extern from "<errno.h>" nogil:
    int errno
    int EINTR
    int EAGAIN
    int EWOULDBLOCK
    int EINPROGRESS
    int ETIMEDOUT
    int EBADF

cdef extern from "<unistd.h>" nogil:
    ctypedef long ssize_t
    int close(int)
    ssize_t read(int, void*, size_t)
    ssize_t write(int, const void*, size_t)
    int pipe(int*)

cdef extern from "<fcntl.h>" nogil:
    int fcntl(int, int, ...)
    int F_GETFL
    int F_SETFL
    int F_SETFD
    int FD_CLOEXEC
    int O_NONBLOCK

cdef extern from "<poll.h>" nogil:
    cdef struct pollfd:
        int fd
        short events
        short revents
    ctypedef unsigned long nfds_t
    int poll(pollfd*, nfds_t, int)
    short POLLIN
    short POLLOUT
    short POLLERR
    short POLLHUP
    short POLLNVAL

cdef extern from "<sys/socket.h>" nogil:
    ctypedef unsigned int socklen_t
    cdef struct sockaddr:
        pass
    int socket(int, int, int)
    int connect(int, const sockaddr*, socklen_t)
    ssize_t send(int, const void*, size_t, int)
    ssize_t recv(int, void*, size_t, int)
    int getsockopt(int, int, int, void*, socklen_t*)
    int setsockopt(int, int, int, const void*, socklen_t)
    int AF_UNSPEC
    int SOCK_STREAM
    int SOL_SOCKET
    int SO_ERROR
    int MSG_NOSIGNAL

cdef extern from "<netinet/in.h>" nogil:
    int IPPROTO_TCP

cdef extern from "<netinet/tcp.h>" nogil:
    int TCP_NODELAY

cdef extern from "<netdb.h>" nogil:
    cdef struct addrinfo:
        int ai_flags
        int ai_family
        int ai_socktype
        int ai_protocol
        socklen_t ai_addrlen
        sockaddr* ai_addr
        addrinfo* ai_next
    int getaddrinfo(const char*, const char*, const addrinfo*, addrinfo**)
    void freeaddrinfo(addrinfo*)
    int AI_NUMERICSERV


cdef inline int64_t monotonic_ms() noexcept nogil:
    # The same clock as Python's time.monotonic_ns (CLOCK_MONOTONIC on Linux), the clients' clock,
    # so instants stored in kcore.timers.Heartbeat by either side compare.
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
