# Shared by the scripts (sourced): the project venv in .venv, created on first use, with
# commscope installed editable (plus the test tools and the dask extra when the first
# argument is "test").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
target=.
[ "${1:-}" = test ] && target=".[test,dask]"
if ! .venv/bin/python -m pip install -e "$target" > .venv/pip.log 2>&1; then
  cat .venv/pip.log >&2
  exit 1
fi
