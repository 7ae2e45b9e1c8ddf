#!/usr/bin/env bash
# Builds the shell worker image meshwork/shell-worker:latest (worker
# shell_v1) with no registry: a real shell worker, not a test double.
#
# Two steps:
#   1. its userland, meshwork/shell-worker-userland:latest: a Debian root
#      made with debootstrap from the mirror the machine's apt already uses,
#      with Debian's golang-go, git and ca-certificates, imported with
#      `docker import` (../debian-rootfs.sh). It is rebuilt only when this
#      script, the shared build code or the mirror changed (the label
#      meshwork.inputs holds their hash); that needs root.
#   2. the worker on it: deploy/docker/shell-worker.Dockerfile, the same
#      Dockerfile as the public image, with the userland as GO_IMAGE. It adds
#      meshworker from `make build` and is cheap: Docker's cache keeps it
#      when nothing changed.
#
#   IMAGE              image to build (default meshwork/shell-worker:latest)
#   USERLAND_IMAGE     its userland (default meshwork/shell-worker-userland:latest)
#   BIN                directory of the linux binaries, relative to the
#                      repository (default bin/linux_amd64; make passes its own)
#   MESHWORK_BUILD_DIR scratch space for the root filesystem (default .build)
#   DEBIAN_MIRROR, DEBIAN_SUITE  override the mirror read from apt's sources
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
# shellcheck source=../debian-rootfs.sh
source "$here/../debian-rootfs.sh"
image="${IMAGE:-meshwork/shell-worker:latest}"
userland="${USERLAND_IMAGE:-meshwork/shell-worker-userland:latest}"
bin="${BIN:-bin/linux_amd64}"
packages=(golang-go git ca-certificates)

[[ -x "$repo/$bin/meshworker" ]] || { echo "shell-worker: no $bin/meshworker: run \`make build\` first" >&2; exit 1; }

offline_init shell-worker "${packages[*]}" "$here/build.sh"
# The images a rebuild replaces (the worker first: it is the userland's child).
replaced=()
for ref in "$image" "$userland"; do
  replaced+=("$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null || true)")
done
if offline_current "$userland"; then
  offline_log "$userland is up to date ($inputs)"
else
  offline_bootstrap
  offline_install "${packages[@]}"
  offline_slim
  # Go's own test suite, which no go command reads.
  rm -rf "$root"/usr/share/go-*/test
  offline_import "$userland" 'LABEL org.opencontainers.image.title=meshwork-shell-worker-userland' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8'
fi

mkdir -p "$build_dir"
log="$build_dir/shell-worker-docker-build.log"
docker build -q -f "$repo/deploy/docker/shell-worker.Dockerfile" \
  --build-arg GO_IMAGE="$userland" --build-arg BIN="$bin" \
  -t "$image" "$repo" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
# Left untagged by the rebuild, they would keep their space; one a container
# still uses stays.
for id in "${replaced[@]}"; do
  if [[ -n "$id" && "$(docker image inspect -f '{{len .RepoTags}}' "$id" 2>/dev/null)" == 0 ]]; then
    docker rmi "$id" >/dev/null 2>&1 || true
  fi
done
offline_log "built $image"
