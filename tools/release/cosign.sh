#!/usr/bin/env bash
# Builds cosign at the version tools/release/go.mod pins, into the cache
# (skipped when there), and prints its path. release.sh and rehearsal.sh
# sign with it; the release workflow too, so the rehearsal signs as a
# release does.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
version="$(go -C "$here" list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)"
out="$cache/cosign-$version/cosign"
if [[ ! -x $out ]]; then
	mkdir -p "$(dirname "$out")"
	start=$SECONDS
	echo "tools/release/cosign.sh: building cosign $version from its module (a few minutes cold)" >&2
	CGO_ENABLED=0 go -C "$here" build -trimpath -ldflags='-s -w' -o "$out.tmp" github.com/sigstore/cosign/v3/cmd/cosign
	mv "$out.tmp" "$out"
	echo "tools/release/cosign.sh: built cosign $version in $((SECONDS - start))s" >&2
fi
echo "$out"
