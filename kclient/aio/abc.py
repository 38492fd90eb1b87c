"""aiokafka's ``aiokafka.abc``: the rebalance listener and the OAUTHBEARER token provider."""
from __future__ import annotations

import abc

from kclient.aio.listener import ConsumerRebalanceListener

__all__ = ["ConsumerRebalanceListener", "AbstractTokenProvider"]


class AbstractTokenProvider(abc.ABC):
    """An OAUTHBEARER token source: ``async def token()`` returns a current token (reuse it
    while it is valid: kclient asks on each new connection); ``extensions()`` optional SASL
    extensions. The coroutine runs on the client's event loop."""

    @abc.abstractmethod
    async def token(self) -> str:
        """A current token."""

    def extensions(self) -> dict:
        return {}
