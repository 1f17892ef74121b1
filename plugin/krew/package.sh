#!/usr/bin/env bash
# Builds kubectl-stickydrain for every platform krew installs it on, one
# tar.gz each holding the binary, and renders
# the krew manifest with their addresses and sha256 sums.
#   plugin/krew/package.sh VERSION OUTDIR [BASE_URL]
# BASE_URL defaults to the GitHub release of VERSION.
set -euo pipefail
version="${1:?usage: package.sh VERSION OUTDIR [BASE_URL]}"
out="${2:?usage: package.sh VERSION OUTDIR [BASE_URL]}"
base="${3:-https://github.com/stickydrain/stickydrain/releases/download/$version}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
platforms=""
for p in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64; do
  os="${p%/*}" arch="${p#*/}"
  bin=kubectl-stickydrain
  [ "$os" = windows ] && bin=kubectl-stickydrain.exe
  mkdir -p "$work/$os-$arch"
  (cd "$root" && CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath \
    -ldflags "-s -w -X main.Version=$version" -o "$work/$os-$arch/$bin" ./plugin/cmd/kubectl-stickydrain)
  archive="kubectl-stickydrain_${version}_${os}_${arch}.tar.gz"
  tar -C "$work/$os-$arch" -czf "$out/$archive" "$bin"
  sum="$(sha256sum "$out/$archive" | cut -d' ' -f1)"
  platforms+="  - selector:
      matchLabels: {os: $os, arch: $arch}
    uri: $base/$archive
    sha256: $sum
    bin: $bin
"
done
PLATFORMS="$platforms" awk -v version="$version" '
  /^#/ { next }
  /^PLATFORMS$/ { printf "%s", ENVIRON["PLATFORMS"]; next }
  { sub(/VERSION/, version); print }' "$root/plugin/krew/stickydrain.yaml" > "$out/stickydrain.krew.yaml"
echo "$out/stickydrain.krew.yaml"
