#!/usr/bin/env bash
# Prints the Debian mirror and suite this machine's own apt sources use, so the
# offline images are bootstrapped from the same place apt already reaches. No
# host name is written into the repository: it is read here, at run time.
#
# Honours DEBIAN_MIRROR and DEBIAN_SUITE when set.
set -euo pipefail

mirror="${DEBIAN_MIRROR:-}"
suite="${DEBIAN_SUITE:-}"

if [[ -z "$mirror" || -z "$suite" ]]; then
  # deb822 sources (*.sources): take the first stanza that serves the main
  # archive (a suite without "-security" or "-updates").
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    [[ -r "$f" ]] || continue
    if [[ "$f" == *.sources ]]; then
      read -r m s < <(awk '
        /^URIs:/   {uri=$2}
        /^Suites:/ {for (i=2;i<=NF;i++) if ($i !~ /-(security|updates|backports)$/) {s=$i; break}}
        /^$/       {if (uri != "" && s != "" && uri ~ /debian\/?$/) {print uri, s; exit} uri=""; s=""}
        END        {if (uri != "" && s != "" && uri ~ /debian\/?$/) print uri, s}
      ' "$f") || true
    else
      read -r m s < <(awk '
        $1=="deb" && $0 !~ /security/ {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i, $(i+1); exit}}
      ' "$f") || true
    fi
    if [[ -n "${m:-}" && -n "${s:-}" ]]; then
      mirror="${mirror:-$m}"
      suite="${suite:-$s}"
      break
    fi
  done
fi

if [[ -z "$mirror" || -z "$suite" ]]; then
  echo "debian-mirror: no Debian mirror found in the apt sources; set DEBIAN_MIRROR and DEBIAN_SUITE" >&2
  exit 1
fi
echo "$mirror $suite"
