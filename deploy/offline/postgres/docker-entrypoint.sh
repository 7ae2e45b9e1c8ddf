#!/usr/bin/env bash
# Entrypoint of the offline Postgres image. It follows the public postgres
# image's contract so either image can be used interchangeably:
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
#   POSTGRES_USER (default postgres), POSTGRES_DB (default $POSTGRES_USER),
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD, and *.sql / *.sh files in
#   /docker-entrypoint-initdb.d run once on first start.
# Like the public image it starts a socket-only server for initialisation and
# then the real one, so "database system is ready to accept connections" is
# logged twice on a first start; wait strategies written for one image work
# for the other.
set -Eeuo pipefail

if [[ "${1:0:1}" == '-' ]]; then
  set -- postgres "$@"
fi

if [[ "$1" == 'postgres' && "$(id -u)" == '0' ]]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ "$1" == 'postgres' && ! -s "$PGDATA/PG_VERSION" ]]; then
  POSTGRES_USER="${POSTGRES_USER:-postgres}"
  POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [[ -z "${POSTGRES_PASSWORD:-}" && "$auth" != 'trust' ]]; then
    cat >&2 <<'MSG'
Error: Database is uninitialized and superuser password is not specified.
       Set POSTGRES_PASSWORD to a non-empty value for the superuser, or set
       POSTGRES_HOST_AUTH_METHOD=trust to allow all connections without a password.
MSG
    exit 1
  fi

  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags.
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-}
  printf "listen_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
  printf 'host all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
  psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
  if [[ "$POSTGRES_DB" != 'postgres' ]]; then
    "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
      *.sh) echo "running $f"; . "$f" ;;
      *) [[ -e "$f" ]] && echo "ignoring $f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo 'PostgreSQL init process complete; ready for start up.'
fi

exec "$@"
