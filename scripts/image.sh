#!/usr/bin/env bash
# Build the image commscope:<version> with podman from deploy/container/Containerfile:
#   1. a Debian bookworm base made by mmdebstrap (python3, no docs), cached as a tarball in
#      $COMMSCOPE_IMAGE_CACHE (default .venv/image-cache) and imported as
#      localhost/commscope-base:<hash of its options>; --fresh-base makes it again (security
#      updates);
#   2. the project's wheel and its dependencies' cp311 manylinux wheels (and pip's, to install
#      them) built and downloaded on the host into the build context;
#   3. `podman build`, which then needs no network.
# Needs podman and mmdebstrap (Debian packages; root, or mmdebstrap's unshare mode), python3
# with pip, and the network for steps 1-2. Where podman's defaults fail on a host, set
# CONTAINERS_CONF (deploy/container/containers.conf holds settings that work on CI's machines).
# Prints the image's name and size. Settings: COMMSCOPE_IMAGE (name:tag, default
# commscope:<version>), COMMSCOPE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fresh=0
case "${1:-}" in
  --fresh-base) fresh=1 ;;
  "") ;;
  *) echo "usage: scripts/image.sh [--fresh-base]" >&2; exit 2 ;;
esac

python=${PYTHON:-python3}
version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
image=${COMMSCOPE_IMAGE:-commscope:$version}
cache=${COMMSCOPE_IMAGE_CACHE:-.venv/image-cache}
mirror=${COMMSCOPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
started=$SECONDS

# 1. The base: Debian's essential packages, python3 and libstdc++6 (pyzmq's libzmq), merged
# /usr (no usrmerge, so no perl), without documentation, manuals, translations or glibc's
# iconv modules (python does not use them).
base_options=(
  --variant=essential --include=python3 --include=libstdc++6
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/lib/*/gconv/*'
  bookworm - "deb $mirror bookworm main"
  "deb ${mirror%/debian}/debian-security bookworm-security main"
)
key=$(printf '%s\n' "${base_options[@]}" | sha256sum | cut -c1-12)
base=localhost/commscope-base:$key
tarball=$cache/base-$key.tar
if [ "$fresh" = 1 ]; then
  rm -f "$tarball"
  podman image rm --force "$base" >/dev/null 2>&1 || true
fi
if [ ! -s "$tarball" ]; then
  echo "making the base with mmdebstrap (about a minute)" >&2
  rm -f "$cache"/base-*.tar  # bases made with other options
  if ! mmdebstrap --quiet "${base_options[@]}" > "$tarball.part" 2> "$cache/mmdebstrap.log"; then
    cat "$cache/mmdebstrap.log" >&2
    exit 1
  fi
  mv "$tarball.part" "$tarball"
fi
if ! podman image exists "$base"; then
  podman import --quiet "$tarball" "$base" >/dev/null
fi

# 2. The wheels, for the image's python (CPython 3.11, glibc 2.36), whatever the host's.
context=$(mktemp -d "$cache/context.XXXXXX")
trap 'rm -rf "$context"' EXIT
mkdir "$context/wheels"
# The wheel's timestamps from the last commit: an unchanged tree gives the same bytes, and
# podman build reuses its layers.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || echo 315532800) \
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$context/wheels" . >&2
# pip expands no manylinux_2_N tag to the older ones the image's glibc 2.36 also runs: list them.
platforms=(--platform any --platform "manylinux2014_$(uname -m)")
for glibc in $(seq 17 36); do platforms+=(--platform "manylinux_2_${glibc}_$(uname -m)"); done
"$python" -m pip download --quiet --dest "$context/wheels" --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
  "$context/wheels/commscope-$version-py3-none-any.whl" pip >&2

# 3. The image, built without a network.
podman build --quiet --network none --build-arg "BASE=$base" --build-arg "VERSION=$version" \
  --file deploy/container/Containerfile --tag "$image" "$context" >/dev/null
# What earlier builds left: superseded images, install stages but the newest (this build's,
# made or reused: the cache of the next), bases made with other options.
podman image prune --force --filter label=org.opencontainers.image.title=commscope >/dev/null
podman images --quiet --filter label=commscope.stage=install | tail -n +2 \
  | xargs -r podman image rm --force >/dev/null 2>&1 || true
podman images --format '{{.Repository}}:{{.Tag}}' localhost/commscope-base | grep -vx "$base" \
  | xargs -r podman image rm >/dev/null 2>&1 || true
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "built $image: $((size / 1000000)) MB, $((SECONDS - started)) s"
