#!/usr/bin/env bash
# Set up (first run only) and report on the bundled sample: a real 2-rank DDP run of
# tests/gloo_job/train.py (torch CPU, gloo), two profiling windows, TorchTitan layout.
source "$(dirname "$0")/env.sh"
.venv/bin/commscope report samples/gloo_ddp_2rank --config samples/mlp_ddp.toml \
  --out trace_analysis --print "$@"
