#!/usr/bin/env bash
# Set up (first run only) and run every check: ruff, mypy --strict, and the test suite
# (including a real torchrun gloo job, so torch 2.13.0 CPU is installed here, and a real
# Prometheus server remote-writing into a real VictoriaMetrics: Debian's prometheus,
# victoria-metrics and shellcheck, and chromium for the HTML report, are installed when
# running as root).
source "$(dirname "$0")/env.sh" test
if ! command -v promtool >/dev/null || ! command -v shellcheck >/dev/null \
  || ! command -v victoria-metrics >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: prometheus victoria-metrics shellcheck" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends prometheus victoria-metrics shellcheck) > .venv/apt.log 2>&1 \
      || { cat .venv/apt.log >&2; exit 1; }
  fi
fi
# Debian's chromium: the HTML report's browser test (tests/exporters/test_html_browser.py).
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian package: chromium" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends chromium) > .venv/apt-chromium.log 2>&1 \
    || { cat .venv/apt-chromium.log >&2; exit 1; }
fi
# Debian's slurm-wlm and munge: a real Slurm (munged, slurmctld, two slurmd) runs a job through
# deploy/slurm's prolog and epilog (tests/deploy/test_slurm_real.py).
if ! command -v slurmctld >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian packages: slurm-wlm munge" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends slurm-wlm munge) > .venv/apt-slurm.log 2>&1 \
    || { cat .venv/apt-slurm.log >&2; exit 1; }
fi
# Debian's podman, runc and mmdebstrap: the image's test (tests/deploy/test_image.py).
if ! command -v podman >/dev/null || ! command -v runc >/dev/null \
  || ! command -v mmdebstrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: podman runc mmdebstrap" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends podman runc mmdebstrap uidmap containernetworking-plugins) \
      > .venv/apt-podman.log 2>&1 || { cat .venv/apt-podman.log >&2; exit 1; }
  fi
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet torch==2.13.0
fi
.venv/bin/ruff format --check model collector pipeline exporters service tests
.venv/bin/ruff check model collector pipeline exporters service tests
# mypy cannot follow setuptools' package-dir mapping: give it the installed layout.
typed=$(mktemp -d)
trap 'rm -rf "$typed"' EXIT
mkdir "$typed/commscope"
for part in model collector pipeline exporters service; do ln -s "$PWD/$part" "$typed/commscope/$part"; done
ln -s "$PWD/commscope/__init__.py" "$typed/commscope/__init__.py"
(cd "$typed" && MYPYPATH="$typed" "$OLDPWD/.venv/bin/mypy" --config-file "$OLDPWD/pyproject.toml" -p commscope)
.venv/bin/python -m pytest "$@"
