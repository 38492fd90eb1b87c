"""KIP-714 client metrics push: the subscription, the OTLP encoding and the push loop."""
