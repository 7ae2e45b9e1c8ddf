#!/usr/bin/env bash
# Builds the offline Postgres image (no registry needed): a Debian root made
# with debootstrap from the mirror the machine's apt already uses, plus
# Debian's postgresql package, imported with `docker import`
# (../debian-rootfs.sh).
#
#   IMAGE              image to build (default meshwork/postgres-offline:15)
#   MESHWORK_BUILD_DIR scratch space for the root filesystem (default .build)
#   DEBIAN_MIRROR, DEBIAN_SUITE  override the mirror read from apt's sources
#
# The image is rebuilt only when this script, the entrypoint, the shared
# build code or the mirror changed: its inputs' hash is stored as the label
# meshwork.inputs.
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../debian-rootfs.sh
source "$here/../debian-rootfs.sh"
image="${IMAGE:-meshwork/postgres-offline:15}"
pg_major=15

offline_init postgres-offline "$pg_major" "$here/build.sh" "$here/docker-entrypoint.sh"
if offline_current "$image"; then
  offline_log "$image is up to date ($inputs)"
  exit 0
fi

offline_bootstrap
# Without Debian's default cluster: the entrypoint makes its own in $PGDATA.
mkdir -p "$root/etc/postgresql-common/createcluster.d"
echo 'create_main_cluster = false' >"$root/etc/postgresql-common/createcluster.d/meshwork.conf"
offline_install "postgresql-$pg_major"
offline_slim
mkdir -p "$root/docker-entrypoint-initdb.d" "$root/var/lib/postgresql/data"
install -m 0755 "$here/docker-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"

# SIGINT is Postgres's fast shutdown, as in the public image.
offline_import "$image" $'STOPSIGNAL SIGINT\nLABEL org.opencontainers.image.title=meshwork-postgres-offline' \
  --change "ENV PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change 'ENV PGDATA=/var/lib/postgresql/data' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'VOLUME /var/lib/postgresql/data' \
  --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  --change 'EXPOSE 5432'
offline_log "built $image"
