#!/usr/bin/env bash
# Installs what the tests need and a fresh Debian machine may lack. Idempotent
# and quiet when everything is there already.
set -euo pipefail

need=()
command -v ip >/dev/null || need+=(iproute2)
# test/podhost: nsenter, unshare and mount run each container in its namespaces.
# controller tests: the real HAProxy from Debian (2.6), never started as a service.
command -v haproxy >/dev/null || need+=(haproxy)
for c in nsenter unshare mount; do
	command -v "$c" >/dev/null || { need+=(util-linux mount); break; }
done

if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "test/deps.sh: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "test/deps.sh: installing ${need[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
