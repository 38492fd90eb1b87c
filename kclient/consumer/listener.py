"""The rebalance listener's names under the consumer package; defined in kclient.subscription.listener."""
from kclient.subscription.listener import *  # noqa: F401,F403
from kclient.subscription.listener import __all__  # noqa: F401
