"""commscope.service: the composition root — the CLI, the daemons and their wiring, the API."""
