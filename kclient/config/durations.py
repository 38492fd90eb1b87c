"""ISO-8601 durations as the Java client reads them (``java.time.Duration``'s ``PnDTnHnMn.nS``),
for ``auto.offset.reset=by_duration:<duration>`` (KIP-1106).

Days, hours, minutes and seconds (with up to nine decimals) only, each with an optional sign,
in any case: ``PT1H``, ``P1DT2H``, ``PT0.5S``, ``pt90m``. Years, months and weeks are refused,
as by Java, because their length in time is not fixed.
"""
from __future__ import annotations

import re

from kclient.errors import ConfigurationError

__all__ = ["BY_DURATION_PREFIX", "iso8601_duration_ms", "by_duration_ms"]

#: ``auto.offset.reset`` values starting with this name a duration to go back by.
BY_DURATION_PREFIX = "by_duration:"

_NUMBER = r"([-+]?[0-9]+)"
_DURATION = re.compile(
    rf"([-+]?)P(?:{_NUMBER}D)?"
    rf"(T(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{{0,9}}))?S)?)?",
    re.IGNORECASE)

_NS_PER = {"days": 86_400 * 10**9, "hours": 3_600 * 10**9, "minutes": 60 * 10**9, "seconds": 10**9}


def iso8601_duration_ms(text: str) -> int:
    """Milliseconds in ``text`` (negative if it says so), rounded towards zero so that a reset
    never reaches further back than asked; ValueError saying what is wrong."""
    total = _duration_ns(text)
    return total // 10**6 if total >= 0 else -(-total // 10**6)


def _duration_ns(text: str) -> int:
    match = _DURATION.fullmatch(text.strip())
    if match is None or (match.group(2) is None and match.group(3) is None) or match.group(3) in ("T", "t"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration PnDTnHnMn.nS (for example PT1H or P1DT2H; "
                         f"years, months and weeks are not accepted)")
    sign, days, _time, hours, minutes, seconds, fraction = match.groups()
    total = 0
    for count, unit in ((days, "days"), (hours, "hours"), (minutes, "minutes"), (seconds, "seconds")):
        if count is not None:
            total += int(count) * _NS_PER[unit]
    if fraction:
        nanos = int(fraction.ljust(9, "0"))
        total += -nanos if seconds is not None and seconds.startswith("-") else nanos
    return -total if sign == "-" else total


def by_duration_ms(value: str, name: str = "auto.offset.reset") -> int | None:
    """The duration of a ``by_duration:<duration>`` reset, in ms; None for any other value.
    ConfigurationError naming the setting for a missing, malformed or negative duration."""
    text = value.strip()
    if not text.lower().startswith(BY_DURATION_PREFIX[:-1]):
        return None
    if not text.lower().startswith(BY_DURATION_PREFIX) or not text[len(BY_DURATION_PREFIX):].strip():
        raise ConfigurationError(f"setting {name!r}: {value!r} names no duration: use "
                                 f"by_duration:<ISO-8601 duration>, for example by_duration:PT1H")
    try:
        ns = _duration_ns(text[len(BY_DURATION_PREFIX):])
    except ValueError as exc:
        raise ConfigurationError(f"setting {name!r}: {exc}") from None
    if ns < 0:
        raise ConfigurationError(f"setting {name!r}: {value!r} is a negative duration; "
                                 f"by_duration goes back in time by a duration of zero or more")
    return ns // 10**6
