#!/usr/bin/env bash
# A release, step by step. .github/workflows/release.yaml runs it on a tag,
# against ghcr.io, with keyless signatures; make release-rehearsal
# (tools/release/rehearsal.sh) runs it here against a Distribution
# registry on loopback, with a key pair made for the rehearsal. One script,
# so the two cannot drift.
#
#   tools/release/release.sh STEP...
#
#   images  build the stickydrain and drainctl images (make images), push
#           them by digest (as make push: DIST/images.txt), write each one's
#           SPDX SBOM (DIST/NAME.spdx.json, tools/images sbom), attest it
#           and sign the image with cosign
#   chart   pin charts/stickydrain to those digests, check it as
#           helm lint --strict does, package it into DIST, push it to
#           oci://$REPO/charts (DIST/chart.txt) and sign it
#   verify  check every signature, every SBOM attestation and the chart's
#           pins against DIST/images.txt; print each reference by digest
#           and "verified"
#
# Environment:
#   REPO        registry/path the images and the chart go under (needed),
#               e.g. ghcr.io/stickydrain
#   VERSION     the release's tag, v<major>.<minor>.<patch>[-<pre>] (needed)
#   PLATFORMS   the images' platforms (default linux/amd64,linux/arm64)
#   DIST        where each step's files go (default dist); the tools' own
#               output goes to DIST/release.log
#   COSIGN_KEY, COSIGN_PUB
#               set: sign with this private key (COSIGN_PASSWORD as cosign
#               reads it) and verify with its public key, no transparency
#               log (the rehearsal). Unset: keyless, as the workflow signs:
#               a Fulcio certificate for the job's OIDC identity, logged in
#               Rekor
#   CERT_IDENTITY_REGEXP, CERT_OIDC_ISSUER
#               whom keyless verification accepts (default: this
#               repository's release workflow on a tag, GitHub's issuer)
#   PLAIN_HTTP  1: the registry speaks plain HTTP (the rehearsal's)
#   COSIGN      a cosign binary (default: tools/release/cosign.sh builds
#               the version tools/release/go.mod pins into the cache)
#
# Credentials: ~/.docker/config.json (docker login, or the workflow's
# login action) for the images, the chart and the signatures alike.
set -euo pipefail

if (($# == 0)); then
	echo "usage: tools/release/release.sh images|chart|verify..." >&2
	exit 2
fi
for s in "$@"; do
	case $s in
	images | chart | verify) ;;
	*)
		echo "release.sh: unknown step $s: want images, chart or verify" >&2
		exit 2
		;;
	esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
: "${REPO:?REPO is needed: the registry/path to publish under, e.g. ghcr.io/stickydrain}"
: "${VERSION:?VERSION is needed: the release tag, e.g. v1.2.0}"
if [[ ! $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "release.sh: VERSION=$VERSION: want v<major>.<minor>.<patch>[-<pre-release>], e.g. v1.2.0 or v1.2.0-rc.1" >&2
	exit 2
fi
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
DIST="$(mkdir -p "${DIST:-dist}" && cd "${DIST:-dist}" && pwd)"
images=(stickydrain drainctl)
# Where make images writes them: $(BIN)/images, as the Makefile says.
layouts="${BIN:-bin}/images"
[[ $layouts == /* ]] || layouts="$root/$layouts"

log() { echo "release.sh: $*" >&2; }

# into FILE CMD...: runs CMD with its output in FILE and its messages in
# DIST/release.log, shown when it fails.
into() {
	local file=$1
	shift
	if ! "$@" >"$file" 2>>"$DIST/release.log"; then
		echo "release.sh: failed: $*; the end of $DIST/release.log:" >&2
		tail -40 "$DIST/release.log" >&2
		return 1
	fi
}

# quiet CMD...: runs CMD with its output in DIST/release.log (cosign's,
# Helm's and the builds' chatter), shown when it fails.
quiet() {
	if ! "$@" >>"$DIST/release.log" 2>&1; then
		echo "release.sh: failed: $*; the end of $DIST/release.log:" >&2
		tail -40 "$DIST/release.log" >&2
		return 1
	fi
}

# cosign, at the version tools/release/go.mod pins.
cosign="${COSIGN:-$(tools/release/cosign.sh)}"
cache="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
bin="$cache/release-tools"
mkdir -p "$bin"
# The chart's steps, with Helm's SDK (tools/helm/cmd/stickydrain-chart).
chart_tool="$bin/stickydrain-chart"
CGO_ENABLED=0 go -C tools/helm build -trimpath -o "$chart_tool" ./cmd/stickydrain-chart

registry_flags=()
if [[ ${PLAIN_HTTP:-} == 1 ]]; then
	registry_flags=(--allow-http-registry)
fi
sign_flags=(--yes)
verify_flags=()
if [[ -n ${COSIGN_KEY:-} ]]; then
	: "${COSIGN_PUB:?COSIGN_PUB is needed with COSIGN_KEY: the public key to verify with}"
	# A key and no transparency log: nothing leaves this machine.
	sign_flags+=(--key "$COSIGN_KEY" --tlog-upload=false --use-signing-config=false)
	verify_flags=(--key "$COSIGN_PUB" --insecure-ignore-tlog=true)
else
	: "${GITHUB_REPOSITORY:=stickydrain/stickydrain}"
	verify_flags=(
		--certificate-identity-regexp "${CERT_IDENTITY_REGEXP:-^https://github.com/$GITHUB_REPOSITORY/\.github/workflows/release\.yaml@refs/tags/v}"
		--certificate-oidc-issuer "${CERT_OIDC_ISSUER:-https://token.actions.githubusercontent.com}"
	)
fi

# ref NAME: NAME's reference by digest, from DIST/images.txt.
ref() {
	local r
	r="$(grep -E "^[^ ]*/$1:[^ ]*@sha256:[0-9a-f]{64}$" "$DIST/images.txt" || true)"
	if [[ -z $r ]]; then
		log "no $1 image by digest in $DIST/images.txt: run the images step first"
		return 1
	fi
	echo "$r"
}

step_images() {
	log "building the images for $PLATFORMS"
	quiet make --no-print-directory images VERSION="$VERSION" REPO="$REPO" PLATFORMS="$PLATFORMS" IMAGES="$(
		IFS=,
		echo "${images[*]}"
	)"
	into "$DIST/images.txt" go -C tools/images run . push --out "$layouts" --repo "$REPO" --images "$(
		IFS=,
		echo "${images[*]}"
	)"
	quiet go -C tools/images run . sbom --out "$layouts" --dest "$DIST" --images "$(
		IFS=,
		echo "${images[*]}"
	)"
	for name in "${images[@]}"; do
		local r
		r="$(ref "$name")"
		log "attesting $name's SBOM and signing $r"
		quiet "$cosign" attest "${sign_flags[@]}" "${registry_flags[@]}" --type spdxjson --predicate "$DIST/$name.spdx.json" "$r"
		quiet "$cosign" sign "${sign_flags[@]}" "${registry_flags[@]}" "$r"
	done
	cat "$DIST/images.txt"
}

# chart_args: the chart tool's --image flags (and --plain-http) into the
# array args; fails when images.txt lacks an image.
chart_args() {
	local name r
	args=()
	for name in "${images[@]}"; do
		r="$(ref "$name")" || return 1
		args+=(--image "$name=$r")
	done
	if [[ ${PLAIN_HTTP:-} == 1 ]]; then
		args+=(--plain-http)
	fi
}

step_chart() {
	local args chart
	chart_args
	log "pinning, packaging and pushing the chart"
	into "$DIST/chart.txt" "$chart_tool" publish --tag "$VERSION" --repo "$REPO" --out "$DIST" "${args[@]}"
	chart="$(cat "$DIST/chart.txt")"
	log "signing the chart $chart"
	quiet "$cosign" sign "${sign_flags[@]}" "${registry_flags[@]}" "$chart"
	echo "$chart"
}

step_verify() {
	local name r chart args
	for name in "${images[@]}"; do
		r="$(ref "$name")"
		quiet "$cosign" verify "${verify_flags[@]}" "${registry_flags[@]}" "$r"
		quiet "$cosign" verify-attestation "${verify_flags[@]}" "${registry_flags[@]}" --type spdxjson "$r"
		echo "$r verified: signature, SPDX SBOM attestation"
	done
	chart="$(cat "$DIST/chart.txt")"
	chart_args
	quiet "$chart_tool" verify --chart "$chart" "${args[@]}"
	quiet "$cosign" verify "${verify_flags[@]}" "${registry_flags[@]}" "$chart"
	echo "$chart verified: signature, pins ${args[1]#*=} and ${args[3]#*=}"
}

for s in "$@"; do
	"step_$s"
done
