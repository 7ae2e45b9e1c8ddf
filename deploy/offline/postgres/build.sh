#!/usr/bin/env bash
# Builds the offline Postgres image (no registry needed): a Debian root made
# with debootstrap from the mirror the machine's apt already uses, plus
# Debian's postgresql package, imported with `docker import`.
#
#   IMAGE              image to build (default meshwork/postgres-offline:15)
#   MESHWORK_BUILD_DIR scratch space for the root filesystem (default .build)
#   DEBIAN_MIRROR, DEBIAN_SUITE  override the mirror read from apt's sources
#
# The image is rebuilt only when this script, the entrypoint or the mirror
# changed: its inputs' hash is stored as the label meshwork.inputs.
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
image="${IMAGE:-meshwork/postgres-offline:15}"
pg_major=15
build_dir="${MESHWORK_BUILD_DIR:-$repo/.build}"
root="$build_dir/rootfs-postgres"

read -r mirror suite < <("$here/../debian-mirror.sh")
inputs="$( (cat "$here/build.sh" "$here/docker-entrypoint.sh"; echo "$mirror $suite $pg_major") | sha256sum | cut -c1-16)"

if [[ "$(docker image inspect -f '{{ index .Config.Labels "meshwork.inputs" }}' "$image" 2>/dev/null || true)" == "$inputs" ]]; then
  echo "postgres-offline: $image is up to date ($inputs)"
  exit 0
fi

command -v debootstrap >/dev/null || { echo "postgres-offline: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || { echo "postgres-offline: debootstrap needs root" >&2; exit 1; }

cleanup() {
  umount "$root/proc" 2>/dev/null || true
}
trap cleanup EXIT

echo "postgres-offline: bootstrapping Debian $suite into $root"
rm -rf "$root"
mkdir -p "$root" "$build_dir/debs"
debootstrap --variant=minbase --cache-dir="$build_dir/debs" "$suite" "$root" "$mirror" >"$build_dir/debootstrap.log" 2>&1 ||
  { tail -n 30 "$build_dir/debootstrap.log" >&2; exit 1; }

# Install postgres inside the root without starting anything, and without
# Debian's default cluster: the entrypoint makes its own in $PGDATA.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mkdir -p "$root/etc/postgresql-common/createcluster.d"
echo 'create_main_cluster = false' >"$root/etc/postgresql-common/createcluster.d/meshwork.conf"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "postgresql-$pg_major" >"$build_dir/apt-postgres.log" 2>&1 ||
  { tail -n 30 "$build_dir/apt-postgres.log" >&2; exit 1; }
umount "$root/proc"

rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/var/log/*
mkdir -p "$root/docker-entrypoint-initdb.d" "$root/var/lib/postgresql/data"
install -m 0755 "$here/docker-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"

echo "postgres-offline: importing $image"
tar -C "$root" --numeric-owner -c . | docker import \
  --change "ENV PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'VOLUME /var/lib/postgresql/data' \
  --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  --change 'EXPOSE 5432' \
  - "$image-rootfs" >/dev/null
# docker import cannot set STOPSIGNAL; a one-line build on the imported image
# can, with no registry: SIGINT is Postgres's fast shutdown, as in the public image.
printf 'FROM %s\nSTOPSIGNAL SIGINT\nLABEL meshwork.inputs=%s org.opencontainers.image.title=meshwork-postgres-offline\n' \
  "$image-rootfs" "$inputs" | docker build -q -t "$image" - >"$build_dir/docker-build.log" 2>&1 ||
  { cat "$build_dir/docker-build.log" >&2; exit 1; }
docker rmi "$image-rootfs" >/dev/null
rm -rf "$root"
echo "postgres-offline: built $image"
