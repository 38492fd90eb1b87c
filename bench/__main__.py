"""``python -m bench [throughput|liveness] [options]``: see bench/runner.py and bench/liveness.py."""
import sys

from bench.runner import main

sys.exit(main())
