#!/usr/bin/env bash
# Builds promtool, which the alerts' tests run (manifests, tools/helm), from
# test/tools/promtool/go.mod (Prometheus' module, pinned) into a versioned
# cache directory outside the checkout, and prints its path. Skipped when
# there.
#
# Built with -tags remove_all_sd (rule checks and rule unit tests need
# none of Prometheus' service-discovery plugins, whose cloud SDKs are a
# fifth of its compile) and with CGO_ENABLED=0 -trimpath, as the parts'
# images, whose Kubernetes libraries it then shares. The first of the two
# test packages that run it (manifests, tools/helm: test/promtool) builds
# it; the other, in another lane, waits for that build (a lock) rather than
# compiling Prometheus beside it. Not among make test's parts: their
# builds keep both cores busy, while the test lanes leave some idle.
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/promtool" && pwd)"
version="$(go -C "$here" list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
dir="$cache_root/promtool-$version-$(sha256sum "$here/go.sum" | cut -c1-12)"
mkdir -p "$dir"
# Tests in two lanes may ask at once: one builds, the other waits for it.
exec 9>"$dir/.lock"
flock 9
if [[ ! -x $dir/promtool ]]; then
	start=$SECONDS
	echo "test/tools/promtool.sh: building promtool $version (Prometheus' module, without its service discovery) into $dir" >&2
	CGO_ENABLED=0 go -C "$here" build -trimpath -tags remove_all_sd -ldflags='-s -w' -o "$dir/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool
	mv "$dir/promtool.tmp" "$dir/promtool"
	echo "test/tools/promtool.sh: built promtool $version in $((SECONDS - start))s" >&2
fi
echo "$dir/promtool"
