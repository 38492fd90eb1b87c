"""``python -m bench [throughput|liveness] [options]``: see bench/runner.py and bench/liveness.py
(``liveness --security SSL,SASL_SSL,...``: on Apache Kafka's secured listeners, bench/liveness_kafka.py).
``python -m bench parallel [options]``: ParallelConsumer vs a plain poll loop, see bench/parallel.py.
``python -m bench rebalance [options]``: rebalance times per client and group protocol, see bench/rebalance.py.
``python -m bench fuzz [options]``: the network decoders under atheris (libFuzzer), see bench/fuzz.py.
``python -m bench chaos --minutes N [options]``: the chaos soak on 3 brokers, see bench/chaos.py.
``python -m bench latency [options]``: end-to-end latency per client at fixed rates, see bench/latency.py.
``python -m bench produce [options]``: kclient's producer against confluent-kafka's, see bench/produce.py.
``python -m bench share [options]``: share-group consumers per client, 1 and 4 members, see bench/share.py."""
import sys

if sys.argv[1:2] == ["rebalance"]:
    from bench.rebalance import main as rebalance_main

    sys.exit(rebalance_main(sys.argv[2:]))

if sys.argv[1:2] == ["parallel"]:
    from bench.parallel import main as parallel_main

    sys.exit(parallel_main(sys.argv[2:]))

if sys.argv[1:2] == ["fuzz"]:
    from bench.fuzz import main as fuzz_main

    sys.exit(fuzz_main(sys.argv[2:]))

if sys.argv[1:2] == ["latency"]:
    from bench.latency import main as latency_main

    sys.exit(latency_main(sys.argv[2:]))

if sys.argv[1:2] == ["produce"]:
    from bench.produce import main as produce_main

    sys.exit(produce_main(sys.argv[2:]))

if sys.argv[1:2] == ["share"]:
    from bench.share import main as share_main

    sys.exit(share_main(sys.argv[2:]))

if sys.argv[1:2] == ["chaos"]:
    from bench.chaos import main as chaos_main

    sys.exit(chaos_main(sys.argv[2:]))

from bench.runner import main

sys.exit(main())
