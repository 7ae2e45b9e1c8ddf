#!/usr/bin/env bash
# Installs Docker Compose v2 as the docker CLI plugin
# (~/.docker/cli-plugins/docker-compose), built from its Go module: users run
# `docker compose` (v2), but a machine without a registry or Docker's apt
# repository has only Debian's docker-compose 1.29. `go install` refuses the
# module (its go.mod has replace directives), so the module the Go proxy
# serves is copied and built in place. Idempotent: a plugin that already
# answers is kept.
#
#   COMPOSE_VERSION  the module version (default v2.40.3)
set -euo pipefail
version=${COMPOSE_VERSION:-v2.40.3}
plugin="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins/docker-compose"

if docker compose version >/dev/null 2>&1; then
  echo "compose-v2: $(docker compose version)"
  exit 0
fi
dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$version" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cp -r "$dir/." "$work"
chmod -R u+w "$work"
mkdir -p "$(dirname "$plugin")"
(cd "$work" && GOWORK=off CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" \
  -o "$plugin" ./cmd)
docker compose version
