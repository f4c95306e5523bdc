#!/usr/bin/env bash
# The live service on one machine, one command: aggregator + two collectors on loopback while
# a replayed 2-rank run writes its traces; prints /metrics during the run and the final report.
source "$(dirname "$0")/env.sh"
exec .venv/bin/python scripts/demo.py
