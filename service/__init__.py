"""commscope.service: the composition root — the CLI, the daemons, their wiring, the API."""
