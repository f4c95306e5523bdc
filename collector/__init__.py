"""commscope.collector: the source side — find trace files, stream-parse, normalise, ship."""
