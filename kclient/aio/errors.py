"""aiokafka's ``aiokafka.errors``: kclient's exception classes, under aiokafka's names too
(so ``from kclient.aio.errors import ...`` replaces ``from aiokafka.errors import ...``)."""
from __future__ import annotations

from kclient.errors import *  # noqa: F401,F403
from kclient.errors import __all__  # noqa: F401
