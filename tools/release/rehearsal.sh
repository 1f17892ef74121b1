#!/usr/bin/env bash
# make release-rehearsal: the release workflow's steps (tools/release/release.sh
# images chart verify), run here against a real OCI registry: the CNCF
# Distribution registry (Debian's docker-registry) on a free loopback port,
# plain HTTP, its storage in a temporary directory. cosign signs with a key
# pair made for the rehearsal and no transparency log (keyless signing
# needs Fulcio and Rekor, out of reach here). Prints every pushed reference
# by digest and what was verified of it.
#
#   VERSION  the tag rehearsed (default v0.0.0-rehearsal)
#   PLATFORMS, as release.sh (default linux/amd64,linux/arm64)
#   KEEP=1   leave the registry's directory (printed) in place
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
registry_bin=/usr/bin/docker-registry
if [[ ! -x $registry_bin ]]; then
	echo "rehearsal.sh: $registry_bin is missing: make deps installs Debian's docker-registry" >&2
	exit 1
fi

work="$(mktemp -d -t stickydrain-rehearsal.XXXXXX)"
pid=
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [[ ${KEEP:-} == 1 ]]; then
		echo "rehearsal.sh: kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# A free loopback port: one nothing answers on.
port=
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 40000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
if [[ -z $port ]]; then
	echo "rehearsal.sh: no free loopback port found" >&2
	exit 1
fi
host="127.0.0.1:$port"
cat >"$work/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: "$work/storage"}
http:
  addr: $host
  secret: stickydrain-rehearsal
EOF
"$registry_bin" serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	if curl -fsS "http://$host/v2/" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$work/registry.log" >&2
		exit 1
	fi
	sleep 0.1
done
curl -fsS "http://$host/v2/" >/dev/null
echo "rehearsal.sh: a Distribution registry at $host ($("$registry_bin" --version 2>/dev/null | head -1))" >&2

export REPO="$host/stickydrain" VERSION="${VERSION:-v0.0.0-rehearsal}" DIST="$work/dist" PLAIN_HTTP=1
# No credentials are needed by this registry; a home of its own keeps the
# user's Docker and Helm logins out of the rehearsal.
export DOCKER_CONFIG="$work/docker" HELM_REGISTRY_CONFIG="$work/helm/registry/config.json"
mkdir -p "$DOCKER_CONFIG"
echo '{}' >"$DOCKER_CONFIG/config.json"

# The key pair, made for this rehearsal.
COSIGN="$(tools/release/cosign.sh)"
export COSIGN COSIGN_PASSWORD=rehearsal COSIGN_KEY="$work/cosign.key" COSIGN_PUB="$work/cosign.pub"
(cd "$work" && "$COSIGN" generate-key-pair >"$work/keys.log" 2>&1) || { cat "$work/keys.log" >&2; exit 1; }
echo "--- published"
tools/release/release.sh images chart
echo "--- verified"
tools/release/release.sh verify
# And verification can fail: the same references checked against another
# key pair's public key are refused.
mkdir -p "$work/other" "$work/dist-other"
(cd "$work/other" && "$COSIGN" generate-key-pair >"$work/keys.log" 2>&1) || { cat "$work/keys.log" >&2; exit 1; }
cp "$DIST/images.txt" "$DIST/chart.txt" "$work/dist-other/"
if COSIGN_PUB="$work/other/cosign.pub" DIST="$work/dist-other" tools/release/release.sh verify >/dev/null 2>"$work/other.log"; then
	echo "rehearsal.sh: the signatures verified against another key: verification checks nothing" >&2
	exit 1
fi
# Refused by cosign's verification itself, not for want of a file or a tool.
if ! grep -q "^release.sh: failed: .*cosign.* verify " "$work/other.log"; then
	echo "rehearsal.sh: the check against another key failed, but not in cosign verify:" >&2
	cat "$work/other.log" >&2
	exit 1
fi
echo "--- refused, as it must be: the same references against another key pair's public key"
