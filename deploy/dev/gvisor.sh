#!/usr/bin/env bash
# Registers gVisor (runsc) as the Docker engine's "runsc" runtime, so that
# workers with isolation.runtime: runsc (and the runtime suite under gVisor)
# run: installs Debian's runsc if missing, adds the runtime to the engine's
# daemon configuration (--network=none as a runtime argument: on engines
# that run inside a sandbox themselves, runsc cannot set up a network, so
# only network-none workers run under it there), and reloads the engine
# with SIGHUP. Idempotent; needs root, and apt for the install.
#
#   DOCKER_DAEMON_JSON  the daemon configuration (default /etc/docker/daemon.json)
set -euo pipefail
conf=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}

if ! command -v runsc >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends runsc >/dev/null
fi
runsc=$(command -v runsc)

has_runsc() { docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }

mkdir -p "$(dirname "$conf")"
[ -s "$conf" ] || echo '{}' >"$conf"
# Merged with python3's json (the configuration may hold anything).
python3 - "$conf" "$runsc" <<'PY'
import json, sys
path, runsc = sys.argv[1], sys.argv[2]
with open(path) as f:
    conf = json.load(f)
conf.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
with open(path + ".tmp", "w") as f:
    json.dump(conf, f, indent=2)
PY
mv "$conf.tmp" "$conf"

if has_runsc; then
  echo "gvisor: the engine has the runsc runtime ($conf)"
  exit 0
fi
pid=$(pgrep -xo dockerd) || { echo "gvisor: no dockerd to reload; restart the engine to load $conf" >&2; exit 1; }
kill -HUP "$pid"
for _ in $(seq 50); do
  if has_runsc; then
    echo "gvisor: runsc registered ($runsc) and the engine reloaded"
    exit 0
  fi
  sleep 0.2
done
echo "gvisor: the engine did not pick up the runsc runtime from $conf" >&2
exit 1
