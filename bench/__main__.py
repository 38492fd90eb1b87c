"""``python -m bench [throughput|liveness] [options]``: see bench/runner.py and bench/liveness.py.
``python -m bench parallel [options]``: ParallelConsumer vs a plain poll loop, see bench/parallel.py."""
import sys

if sys.argv[1:2] == ["parallel"]:
    from bench.parallel import main as parallel_main

    sys.exit(parallel_main(sys.argv[2:]))

from bench.runner import main

sys.exit(main())
