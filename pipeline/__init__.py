"""commscope.pipeline: the processor side — interval structures, metrics, aggregation."""
