"""commscope.exporters: the sinks — text and JSON reports, Prometheus."""
