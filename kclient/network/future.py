"""RequestFuture: the result of an asynchronous request (mechanisms §10).

A future is completed exactly once, either with a value (``complete``) or with an exception
(``raise_``). Listeners registered with ``add_listener``/``on_success``/``on_failure``/
``add_both`` run once, in registration order, in the thread that completes the future; a
listener added after completion runs at once in the adding thread. ``compose`` adapts a
future of one type into a future of another, ``chain`` forwards completion to another future.

Completion usually happens on the network thread while the application or heartbeat thread
may be blocked in ``wait``; a lock guards the state transition and a ``threading.Event``
serves blocking waiters. Listeners are called outside the lock, so a listener may freely
complete other futures or add listeners.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Generic, TypeVar

from kclient.errors import (
    CoordinatorNotAvailableError,
    IllegalArgumentError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
)

__all__ = ["RequestFuture", "RequestFutureListener", "RequestFutureAdapter"]

log = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")

_PENDING = 0
_SUCCEEDED = 1
_FAILED = 2


class RequestFutureListener(Generic[T]):
    """Receives the completion of a future. Override either or both methods."""

    def on_success(self, value: T) -> None:  # pragma: no cover - default is a no-op
        pass

    def on_failure(self, exc: BaseException) -> None:  # pragma: no cover
        pass


class RequestFutureAdapter(Generic[T, S]):
    """Turns the completion of a future of T into the completion of a future of S.

    ``on_failure`` forwards the exception unchanged unless overridden.
    """

    def on_success(self, value: T, future: "RequestFuture[S]") -> None:
        raise NotImplementedError

    def on_failure(self, exc: BaseException, future: "RequestFuture[S]") -> None:
        future.raise_(exc)


class _CallbackListener:
    """Adapts plain callables (fn(*args, value)) to the listener interface."""

    __slots__ = ("success", "failure", "args")

    def __init__(self, success, failure, args):
        self.success = success
        self.failure = failure
        self.args = args

    def on_success(self, value):
        if self.success is not None:
            self.success(*self.args, value)

    def on_failure(self, exc):
        if self.failure is not None:
            self.failure(*self.args, exc)


class _ChainListener:
    __slots__ = ("target",)

    def __init__(self, target: "RequestFuture"):
        self.target = target

    def on_success(self, value):
        self.target.complete(value)

    def on_failure(self, exc):
        self.target.raise_(exc)


class _ComposeListener:
    __slots__ = ("adapter", "target")

    def __init__(self, adapter, target: "RequestFuture"):
        self.adapter = adapter
        self.target = target

    def on_success(self, value):
        try:
            self.adapter.on_success(value, self.target)
        except Exception as exc:  # an adapter bug must not leave the composed future pending
            if self.target.is_done:
                raise
            self.target.raise_(exc)

    def on_failure(self, exc):
        try:
            self.adapter.on_failure(exc, self.target)
        except Exception as err:
            if self.target.is_done:
                raise
            self.target.raise_(err)


class RequestFuture(Generic[T]):
    """The eventual value (or exception) of a request."""

    __slots__ = ("_state", "_value", "_exception", "_listeners", "_lock", "_event", "__weakref__")

    def __init__(self, lock: Any = None) -> None:
        self._state = _PENDING
        self._value: Any = None
        self._exception: BaseException | None = None
        self._listeners: list | None = []
        # Many futures may share one lock (a producer's records: a lock each costs about a µs
        # a record): a future holds it only to read or change its own state, never while it
        # calls out (listeners run after it is released).
        self._lock = threading.Lock() if lock is None else lock
        self._event: threading.Event | None = None  # created only when somebody blocks

    @staticmethod
    def complete_all(completions: list) -> None:
        """Complete ``[(future, value), ...]``, futures that share the first one's lock: those
        nobody listens to or waits for under one hold of it, the others (and any with a lock of
        its own) through ``complete()`` once it is released. Futures already done are left as
        they are."""
        if not completions:
            return
        lock = completions[0][0]._lock
        slow = []
        with lock:
            for fut, value in completions:
                if fut._state != _PENDING:
                    continue
                if fut._listeners or fut._event is not None or fut._lock is not lock:
                    slow.append((fut, value))
                    continue
                fut._value = value
                fut._state = _SUCCEEDED
                fut._listeners = None
        for fut, value in slow:
            if not fut.is_done:
                fut.complete(value)

    # ------------------------------------------------------------------ state
    @property
    def is_done(self) -> bool:
        """True once the future holds a value or an exception."""
        return self._state != _PENDING

    def succeeded(self) -> bool:
        return self._state == _SUCCEEDED

    def failed(self) -> bool:
        return self._state == _FAILED

    def retriable(self) -> bool:
        """True if the future failed with an error that may succeed when retried."""
        exc = self._exception
        return self._state == _FAILED and isinstance(exc, KafkaError) and bool(exc.retriable)

    @property
    def value(self) -> T:
        """The value of a succeeded future; IllegalStateError otherwise."""
        if self._state != _SUCCEEDED:
            raise IllegalStateError(
                "the future has not completed successfully" if self._state == _PENDING
                else f"the future failed: {self._exception!r}")
        return self._value

    @property
    def exception(self) -> BaseException:
        """The exception of a failed future; IllegalStateError otherwise."""
        if self._state != _FAILED:
            raise IllegalStateError(
                "the future has not failed" if self._state == _SUCCEEDED
                else "the future is not complete")
        return self._exception  # type: ignore[return-value]

    # ------------------------------------------------------------------ completion
    def complete(self, value: T | None = None) -> "RequestFuture[T]":
        """Complete successfully. Completing a done future raises IllegalStateError."""
        if isinstance(value, BaseException):
            raise IllegalArgumentError("complete() takes a value; use raise_() for an exception")
        return self._settle(_SUCCEEDED, value, None)

    def raise_(self, exc: BaseException | type[BaseException]) -> "RequestFuture[T]":
        """Complete with an exception (an instance, or a class instantiated without arguments)."""
        if isinstance(exc, type) and issubclass(exc, BaseException):
            exc = exc()
        if not isinstance(exc, BaseException):
            raise IllegalArgumentError(f"raise_() takes an exception, got {exc!r}")
        return self._settle(_FAILED, None, exc)

    def _settle(self, state: int, value: T | None, exc: BaseException | None) -> "RequestFuture[T]":
        """Leave _PENDING once (value or exception), wake waiters, then run the listeners."""
        with self._lock:
            if self._state != _PENDING:
                raise IllegalStateError(f"the future is already complete ({self._describe()})")
            self._value = value
            self._exception = exc
            self._state = state
            listeners, self._listeners = self._listeners, None
            assert listeners is not None  # dropped only here, when the future leaves _PENDING
            event = self._event
        if event is not None:
            event.set()
        for listener in listeners:
            self._fire(listener)
        return self

    def _describe(self) -> str:
        if self._state == _SUCCEEDED:
            return f"value={self._value!r}"
        return f"exception={self._exception!r}"

    def _fire(self, listener) -> None:
        # A failing listener must not stop the others nor escape into the network loop that
        # completed the future: log it with its traceback.
        try:
            if type(listener) is _CallbackListener:
                # The usual listener (on_success/on_failure/add_both), called without its
                # own method in between: one call less for every answer.
                if self._state == _SUCCEEDED:
                    fn, arg = listener.success, self._value
                else:
                    fn, arg = listener.failure, self._exception
                if fn is not None:
                    fn(*listener.args, arg)
            elif self._state == _SUCCEEDED:
                listener.on_success(self._value)
            else:
                listener.on_failure(self._exception)
        except Exception:
            log.exception("a listener of %r raised", self)

    # ------------------------------------------------------------------ listeners
    def add_listener(self, listener: RequestFutureListener[T] | Any) -> "RequestFuture[T]":
        """Register an object with ``on_success(value)`` and ``on_failure(exc)``."""
        with self._lock:
            if self._state == _PENDING:
                self._listeners.append(listener)  # type: ignore[union-attr]
                return self
        self._fire(listener)
        return self

    def on_success(self, fn: Callable[..., Any], *args: Any) -> "RequestFuture[T]":
        """Call ``fn(*args, value)`` when the future succeeds."""
        return self.add_listener(_CallbackListener(fn, None, args))

    def on_failure(self, fn: Callable[..., Any], *args: Any) -> "RequestFuture[T]":
        """Call ``fn(*args, exception)`` when the future fails."""
        return self.add_listener(_CallbackListener(None, fn, args))

    def add_both(self, fn: Callable[..., Any], *args: Any) -> "RequestFuture[T]":
        """Call ``fn(*args, value_or_exception)`` on either outcome."""
        return self.add_listener(_CallbackListener(fn, fn, args))

    def compose(self, adapter: RequestFutureAdapter[T, S]) -> "RequestFuture[S]":
        """A new future completed through ``adapter`` when this one completes."""
        target: RequestFuture[S] = RequestFuture()
        self.add_listener(_ComposeListener(adapter, target))
        return target

    def chain(self, other: "RequestFuture[T]") -> "RequestFuture[T]":
        """Complete ``other`` the same way as this future. Returns ``other``."""
        self.add_listener(_ChainListener(other))
        return other

    # ------------------------------------------------------------------ blocking
    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the future is done or ``timeout_s`` passes; True if done.

        Only for threads that do not drive the network themselves: the thread polling the
        network must use ``ConsumerNetworkClient.poll(future)`` instead, or it waits forever.
        """
        if self._state != _PENDING:
            return True
        with self._lock:
            if self._state != _PENDING:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout_s)

    def get(self, timeout_s: float | None = None) -> T:
        """Wait (see ``wait``) and return the value or raise the exception."""
        if not self.wait(timeout_s):
            raise KafkaTimeoutError(f"future not completed within {timeout_s} s")
        if self._state == _FAILED:
            raise self._exception  # type: ignore[misc]
        return self._value

    # ------------------------------------------------------------------ factories
    @classmethod
    def completed(cls, value: Any = None) -> "RequestFuture":
        return cls().complete(value)

    @classmethod
    def void_success(cls) -> "RequestFuture[None]":
        future: RequestFuture[None] = cls()  # type: ignore[assignment]  # a new future holds no T yet
        return future.complete(None)

    @classmethod
    def failure(cls, exc: BaseException | type[BaseException]) -> "RequestFuture":
        return cls().raise_(exc)

    @classmethod
    def coordinator_not_available(cls) -> "RequestFuture":
        return cls().raise_(CoordinatorNotAvailableError())

    @classmethod
    def no_brokers_available(cls) -> "RequestFuture":
        return cls().raise_(NoBrokersAvailable("no broker is available to send the request to"))

    def __repr__(self) -> str:
        if self._state == _PENDING:
            return f"<{type(self).__name__} pending>"
        return f"<{type(self).__name__} {self._describe()}>"
