# Shared by the offline image builds (postgres/build.sh,
# shell-worker/build.sh); sourced, not run. They need no registry: a Debian
# root filesystem made with debootstrap from the mirror this machine's apt
# already uses (debian-mirror.sh), packages installed into it with apt-get in
# a chroot, turned into an image with `docker import`.
#
# The image a build makes carries the hash of its inputs (the build script,
# this file, the mirror and suite, anything else the build names) as the
# label meshwork.inputs, so an unchanged build is skipped.
#
#   offline_init NAME EXTRA FILE...  sets mirror, suite, build_dir, root and
#                                    inputs (EXTRA: text that changes the
#                                    inputs, e.g. a package version)
#   offline_current IMAGE            true when IMAGE was built from these inputs
#   offline_bootstrap                a minimal Debian in $root (needs root)
#   offline_install PACKAGE...       apt-get install in $root, starting no service
#   offline_slim                     drops apt lists and caches, docs, man pages, locales, logs
#   offline_import IMAGE LINES CHANGE...
#                                    $root as IMAGE: docker import with the
#                                    --change options given, then LINES (more
#                                    Dockerfile lines, such as STOPSIGNAL, which
#                                    import cannot set) and the inputs label;
#                                    $root is removed
#
#   MESHWORK_BUILD_DIR           scratch space (default <repo>/.build); the
#                                debootstrap download cache, $MESHWORK_BUILD_DIR/debs,
#                                is shared by the builds
#   DEBIAN_MIRROR, DEBIAN_SUITE  override the mirror read from apt's sources

offline_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

offline_init() {
  offline_name="$1"
  local extra="$2" found
  shift 2
  found="$("$offline_dir/debian-mirror.sh")"
  read -r mirror suite <<<"$found"
  build_dir="${MESHWORK_BUILD_DIR:-$(cd "$offline_dir/../.." && pwd)/.build}"
  root="$build_dir/rootfs-$offline_name"
  inputs="$( (cat "$@" "$offline_dir/debian-rootfs.sh"; echo "$mirror $suite $extra") | sha256sum | cut -c1-16)"
  trap offline_cleanup EXIT
}

offline_log() { echo "$offline_name: $*"; }

offline_cleanup() {
  umount "$root/proc" 2>/dev/null || true
}

offline_current() {
  [[ "$(docker image inspect -f '{{ index .Config.Labels "meshwork.inputs" }}' "$1" 2>/dev/null || true)" == "$inputs" ]]
}

offline_bootstrap() {
  command -v debootstrap >/dev/null || { echo "$offline_name: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  [[ "$(id -u)" == 0 ]] || { echo "$offline_name: debootstrap needs root" >&2; exit 1; }
  offline_log "bootstrapping Debian $suite into $root"
  rm -rf "$root"
  mkdir -p "$root" "$build_dir/debs"
  debootstrap --variant=minbase --cache-dir="$build_dir/debs" "$suite" "$root" "$mirror" >"$build_dir/$offline_name-debootstrap.log" 2>&1 ||
    { tail -n 30 "$build_dir/$offline_name-debootstrap.log" >&2; exit 1; }
}

offline_install() {
  local log="$build_dir/$offline_name-apt.log"
  # policy-rc.d keeps the packages' services from starting in the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1 ||
    { tail -n 30 "$log" >&2; exit 1; }
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
}

offline_slim() {
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/var/log/*
}

offline_import() {
  local image="$1" lines="$2" log="$build_dir/$offline_name-docker-build.log"
  shift 2
  offline_log "importing $image"
  tar -C "$root" --numeric-owner -c . | docker import "$@" - "$image-rootfs" >/dev/null
  # docker import cannot set labels (nor STOPSIGNAL); a build on the
  # imported image can, with no registry.
  printf 'FROM %s\n%s\nLABEL meshwork.inputs=%s\n' "$image-rootfs" "$lines" "$inputs" |
    docker build -q -t "$image" - >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  docker rmi "$image-rootfs" >/dev/null
  rm -rf "$root"
}
