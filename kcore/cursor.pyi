"""A cursor over a list whose next() is an index step (compiled): iteration over polled records."""
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

class ListCursor(Generic[T]):
    """Hands out a loaded list's items one by one without Python code; calls ``refill()``
    when the list runs out or the cursor is held."""

    def __init__(self, refill: Callable[[], T]) -> None: ...
    def __iter__(self) -> "ListCursor[T]": ...
    def __next__(self) -> T: ...
    def load(self, items: list[T], start: int = 0) -> None:
        """Hand out ``items[start:]`` next; ValueError for a start outside the list."""
    def hold(self) -> None:
        """Stop the fast path: the next ``next()`` calls ``refill`` first."""
    def resume(self) -> None:
        """Hand out the rest of the loaded list without the owner again."""
    def clear(self) -> tuple[list[T], int]:
        """Forget the loaded list; returns it with the index reached."""
    @property
    def items(self) -> list[T]: ...
    @property
    def index(self) -> int: ...
    @property
    def remaining(self) -> int: ...
    @property
    def held(self) -> bool: ...
