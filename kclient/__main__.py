"""``python -m kclient`` is the ``kclient`` command."""
import sys

from kclient.cli import main

sys.exit(main())
