#!/usr/bin/env bash
# Set up (first run only) and run every check: ruff, mypy --strict, and the test suite
# (including a real torchrun gloo job, so torch 2.13.0 CPU is installed here).
source "$(dirname "$0")/env.sh" test
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet torch==2.13.0
fi
.venv/bin/ruff format --check collector pipeline exporters tests
.venv/bin/ruff check collector pipeline exporters tests
# mypy cannot follow setuptools' package-dir mapping: give it the installed layout.
typed=$(mktemp -d)
trap 'rm -rf "$typed"' EXIT
mkdir "$typed/commscope"
for part in collector pipeline exporters; do ln -s "$PWD/$part" "$typed/commscope/$part"; done
(cd "$typed" && MYPYPATH="$typed" "$OLDPWD/.venv/bin/mypy" --config-file "$OLDPWD/pyproject.toml" -p commscope)
.venv/bin/python -m pytest "$@"
