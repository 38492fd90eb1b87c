"""The subscription state's names under the consumer package; defined in kclient.subscription.state."""
from kclient.subscription.state import *  # noqa: F401,F403
from kclient.subscription.state import __all__  # noqa: F401
