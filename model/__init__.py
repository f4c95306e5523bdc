"""The neutral model: what sources, processing and sinks share."""
