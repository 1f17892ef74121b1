#!/usr/bin/env bash
# Builds the ingress controllers the ingress end-to-end tests run against,
# from their Go modules, into a versioned cache directory outside the
# checkout, and prints one line per peer:
#
#   <peer> <version> <executable> [<resources directory>]
#
# Skips a peer whose executable is already there. Usage: build.sh [PEER...]
# (default: haproxy-ingress traefik envoy-gateway).
#
#   haproxy-ingress  v0.16.1 (test/peers/haproxy-ingress/go.mod); cold ~2 min.
#                    Its resources directory holds the module's rootfs/
#                    (templates, Lua), which it reads at run time.
#   traefik          v3.7.13 (test/peers/traefik/go.mod); cold ~6 min, ~3 GB.
#                    Built from a copy of its tools module in the cache with
#                    go-acme/lego/v5 replaced by a copy that leaves out the
#                    DNS providers whose SDKs the module proxy refuses.
#   envoy-gateway    v1.9.1 (test/peers/envoy-gateway/go.mod); cold ~5 min.
#                    Not Envoy Gateway's binaries: stickydrain-eg-translate
#                    (test/peers/envoy-gateway/translate), which runs Envoy
#                    Gateway's own translators, built inside a copy of its
#                    module (they are internal packages). Its resources
#                    directory holds the Gateway API and Envoy Gateway CRDs
#                    the tests install, from the same module.
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"

log() { echo "test/peers/build.sh: $*" >&2; }

# version MODDIR MODULE: the version go.mod requires.
version() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$1/go.mod"; }

# moddir MODULE@VERSION: where the module cache holds it (downloaded if not).
moddir() { (cd "$here/haproxy-ingress" && go mod download -json "$1" | awk -F'"' '$2 == "Dir" {print $4}'); }

haproxy_ingress() {
	local v dir
	v="$(version "$here/haproxy-ingress" github.com/jcmoraisjr/haproxy-ingress)"
	dir="$cache_root/haproxy-ingress-$v"
	if [[ ! -x "$dir/haproxy-ingress" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS src
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building haproxy-ingress $v into $dir (about 2 minutes cold)"
		(cd "$here/haproxy-ingress" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/haproxy-ingress" github.com/jcmoraisjr/haproxy-ingress/pkg)
		src="$(cd "$here/haproxy-ingress" && go list -m -f '{{.Dir}}' github.com/jcmoraisjr/haproxy-ingress)"
		rm -rf "$dir/rootfs"
		cp -r "$src/rootfs" "$dir/rootfs"
		chmod -R u+w "$dir/rootfs"
		mv "$tmp/haproxy-ingress" "$dir/haproxy-ingress"
		rm -rf "$tmp"
		log "built haproxy-ingress $v in $((SECONDS - start))s"
	fi
	echo "haproxy-ingress $v $dir/haproxy-ingress $dir/rootfs"
}

# The DNS providers of lego whose SDKs the module proxy answers 403 for.
refused_dns=(alidns aliesa azion dnsimple edgedns edgeone huaweicloud oraclecloud regfish
	sakuracloud tencentcloud ucloud yandexcloud)

traefik() {
	local v dir
	v="$(version "$here/traefik" github.com/traefik/traefik/v3)"
	dir="$cache_root/traefik-$v"
	if [[ ! -x "$dir/traefik" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS lego_v lego
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building Traefik $v into $dir (about 6 minutes and 3 GB cold)"
		lego_v="$(version "$here/traefik" github.com/go-acme/lego/v5)"
		[[ -n "$lego_v" ]] || lego_v=v5.4.1
		lego="$tmp/lego"
		cp -r "$(moddir "github.com/go-acme/lego/v5@$lego_v")" "$lego"
		chmod -R u+w "$lego"
		local p
		for p in "${refused_dns[@]}"; do
			rm -rf "$lego/providers/dns/$p"
			# Its import, and its case of the provider switch.
			perl -0pi -e "s{\\n\\t\"github.com/go-acme/lego/v5/providers/dns/$p\"}{}g; s{\\n\\tcase [^\\n]*:\\n\\t\\treturn $p\\.[^\\n]*}{}g" \
				"$lego/providers/dns/zz_gen_dns_providers.go"
		done
		cp -r "$here/traefik/." "$tmp/mod"
		chmod -R u+w "$tmp/mod"
		echo "replace github.com/go-acme/lego/v5 => $lego" >>"$tmp/mod/go.mod"
		(cd "$tmp/mod" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/traefik" github.com/traefik/traefik/v3/cmd/traefik)
		mv "$tmp/traefik" "$dir/traefik"
		rm -rf "$tmp"
		log "built Traefik $v in $((SECONDS - start))s"
	fi
	echo "traefik $v $dir/traefik"
}

envoy_gateway() {
	local v dir src sum
	v="$(version "$here/envoy-gateway" github.com/envoyproxy/gateway)"
	# The translator is ours: its source is part of the cache key.
	sum="$(sha256sum "$here/envoy-gateway/translate/main.go" | cut -c1-12)"
	dir="$cache_root/envoy-gateway-$v-$sum"
	if [[ ! -x "$dir/stickydrain-eg-translate" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building Envoy Gateway $v's translators into $dir (about 5 minutes cold)"
		src="$(cd "$here/envoy-gateway" && go mod download -json "github.com/envoyproxy/gateway@$v" | awk -F'"' '$2 == "Dir" {print $4}')"
		cp -r "$src" "$tmp/mod"
		chmod -R u+w "$tmp/mod"
		mkdir -p "$tmp/mod/cmd/stickydrain-eg-translate"
		cp "$here/envoy-gateway/translate/main.go" "$tmp/mod/cmd/stickydrain-eg-translate/"
		(cd "$tmp/mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags='-s -w' -tags stickydrain_envoy_gateway_tree \
			-o "$tmp/stickydrain-eg-translate" ./cmd/stickydrain-eg-translate)
		rm -rf "$dir/crds"
		mkdir -p "$dir/crds"
		cp "$tmp/mod/charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml" "$dir/crds/"
		cp "$tmp/mod/charts/gateway-helm/charts/crds/crds/generated/"*.yaml "$dir/crds/"
		mv "$tmp/stickydrain-eg-translate" "$dir/stickydrain-eg-translate"
		rm -rf "$tmp"
		log "built Envoy Gateway $v's translators in $((SECONDS - start))s"
	fi
	echo "envoy-gateway $v $dir/stickydrain-eg-translate $dir/crds"
}

peers=("$@")
((${#peers[@]})) || peers=(haproxy-ingress traefik envoy-gateway)
for p in "${peers[@]}"; do
	case "$p" in
	haproxy-ingress) haproxy_ingress ;;
	traefik) traefik ;;
	envoy-gateway) envoy_gateway ;;
	*)
		log "unknown peer $p (haproxy-ingress, traefik or envoy-gateway)"
		exit 2
		;;
	esac
done
