#!/usr/bin/env bash
# `make up/db`: Postgres alone, for development, with the schema migrated,
# published on 127.0.0.1 so that servers run from bin/ (and tests given
# TEST_DATABASE_URL) reach it. It prints the DATABASE_URL. The whole stack is
# deploy/compose.yaml (`make up`); this container is not part of it.
#
#   POSTGRES_IMAGE     default postgres:17 (offline: meshwork/postgres-offline:15)
#   MESHWORK_PG_PORT   host port on 127.0.0.1 (default 5432)
#   POSTGRES_PASSWORD  default meshwork (development only)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
image="${POSTGRES_IMAGE:-postgres:17}"
port="${MESHWORK_PG_PORT:-5432}"
password="${POSTGRES_PASSWORD:-meshwork}"
name=meshwork-postgres
marketplace="$repo/bin/linux_$(go env GOARCH)/marketplace"

if [[ -z "$(docker ps -q --filter "name=^${name}$")" ]]; then
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker volume create meshwork-pgdata >/dev/null
  echo "up: starting $name from $image on 127.0.0.1:$port"
  if ! docker run -d --name "$name" --label meshwork.dev=true \
    -e POSTGRES_USER=meshwork -e POSTGRES_PASSWORD="$password" -e POSTGRES_DB=meshwork \
    -p "127.0.0.1:$port:5432" -v meshwork-pgdata:/var/lib/postgresql/data \
    "$image" >/dev/null; then
    docker rm -f "$name" >/dev/null 2>&1 || true
    echo "up: could not start Postgres (see above); if port $port is taken, choose another with MESHWORK_PG_PORT" >&2
    exit 1
  fi
fi

# An already running container keeps the port it was started with.
port="$(docker port "$name" 5432/tcp | head -n 1 | awk -F: '{print $NF}')"

# Ready means the final server accepts TCP connections (during first-start
# initialisation the image listens on its socket only).
for _ in $(seq 1 60); do
  if docker exec "$name" pg_isready -q -h 127.0.0.1 -U meshwork -d meshwork 2>/dev/null; then
    break
  fi
  sleep 1
done
docker exec "$name" pg_isready -q -h 127.0.0.1 -U meshwork -d meshwork ||
  { docker logs --tail 30 "$name" >&2; echo "up: Postgres did not become ready" >&2; exit 1; }

url="postgres://meshwork:${password}@127.0.0.1:${port}/meshwork?sslmode=disable"
DATABASE_URL="$url" "$marketplace" migrate
echo
echo "Postgres is up with the Meshwork schema. For the services and meshctl:"
echo "  export DATABASE_URL='$url'"
echo "Stop it with 'make down/db' (data kept in the volume meshwork-pgdata; docker volume rm meshwork-pgdata deletes it)."
