#!/usr/bin/env bash
# Runs make test's Go tests in four lanes at once. The end-to-end
# scenarios (test/e2e) spend most of their time waiting for drains, so two
# lanes run them, each one scenario at a time from one test binary built
# once: E2E_LANE_A (a -run pattern) in one, every other scenario in the
# other; then each runs half of the soak's rotation (E2E_SOAK).
# The third lane runs every other package one after another (-p 1); the
# fourth the tools modules' tests (the image builder, the chart, the
# dashboards) and the benchmarks once each. Each
# scenario has its own control plane; the machine-wide parts they share
# are locked (cluster.LockRealNode, the pod hosts' subnets and mount
# points). The end-to-end and tools lanes' output is kept in files and
# printed when every lane ends; the run fails if any lane did.
#
# Usage: test/tools/test-lanes.sh GO TIMEOUT PKGS...   (the environment
# carries STICKYDRAIN_K8S_BINS and the others, as make test sets them)
set -euo pipefail
go_cmd=$1 timeout=$2
shift 2
cd "$(dirname "$0")/../.."
root=$PWD

e2e=github.com/stickydrain/stickydrain/test/e2e
mapfile -t pkgs < <("$go_cmd" list "$@")
others=()
run_e2e=false
for p in "${pkgs[@]}"; do
	if [[ $p == "$e2e" ]]; then run_e2e=true; else others+=("$p"); fi
done

# The scenarios of lane A; lane B runs the rest. Balanced by each
# scenario's --- PASS line: at b227a77 lane A (the real node's scenario,
# which waits for the machine's real node while test/node or test/install
# holds it, the ingress scenarios, the partition, the uninstall, the NGINX
# Plus rollout) ran 659 s and its soak shard 377 s, lane B 694 s and 271 s;
# the third lane ended last. E2E_LANE_A= (empty) runs every scenario in
# lane B.
lane_a=${E2E_LANE_A-'^(TestRealNodeKeepsEverySession|TestIngressKeepsEverySession|TestRolloutSurvivesAPartitionAndHAProxyScaling|TestUninstallInOrderLosesNoRequest|TestRolloutAlsoDrainsOnNGINXPlus)$'}
# The soak (make test's short rotation through every flavour) runs at the
# end of the end-to-end lanes, half of its flavours in each
# (STICKYDRAIN_SOAK_SHARD): as one run at the end of both, after the
# longer lane, it made the end-to-end part the longest of the three.
soak=${E2E_SOAK-'^TestSoak$'}

e2e_pid=
e2e_log=
if $run_e2e; then
	work=$(mktemp -d -t stickydrain-lanes.XXXXXX)
	e2e_log=$work/e2e.log
	bin=$work/e2e.test
	# scenarios NAME ARGS...: the test binary, from the package's
	# directory as go test runs it, its output in $work/NAME.log.
	scenarios() {
		local name=$1
		shift
		(cd "$root/test/e2e" && "$bin" -test.v -test.count=1 -test.timeout "$timeout" "$@") >"$work/$name.log" 2>&1
	}
	e2e_lanes() {
		local st=0 a=0 b=0 skip=
		"$go_cmd" test -race -c -o "$bin" "$e2e" || { touch "$work/built"; return 1; }
		touch "$work/built"
		for re in "$lane_a" "$soak"; do
			if [[ -n $re ]]; then skip+="${skip:+|}($re)"; fi
		done
		if [[ -n $lane_a ]]; then
			(
				s=0
				scenarios lane-a -test.run "$lane_a" || s=1
				if [[ -n $soak ]]; then
					STICKYDRAIN_SOAK_SHARD=1/2 scenarios soak-1 -test.run "$soak" || s=1
				fi
				exit "$s"
			) &
			a=$!
		fi
		(
			s=0
			if [[ -n $skip ]]; then
				scenarios lane-b -test.skip "$skip" || s=1
			else
				scenarios lane-b || s=1
			fi
			if [[ -n $soak ]]; then
				if [[ -n $lane_a ]]; then
					STICKYDRAIN_SOAK_SHARD=2/2 scenarios soak-2 -test.run "$soak" || s=1
				else
					scenarios soak -test.run "$soak" || s=1
				fi
			fi
			exit "$s"
		) &
		b=$!
		if ((a)); then wait "$a" || st=1; fi
		wait "$b" || st=1
		for f in lane-a soak-1 lane-b soak-2 soak; do
			if [[ -f $work/$f.log ]]; then
				echo "=== test/e2e $f"
				cat "$work/$f.log"
			fi
		done
		return "$st"
	}
	echo "test/e2e runs in two lanes beside the other packages; its output ($e2e_log) follows when every lane ends"
	e2e_lanes >"$e2e_log" 2>&1 &
	e2e_pid=$!
fi

# e2e_built: wait until the end-to-end test binary is built (or its lane
# has ended). The other lanes wait for it before they compile what it
# compiles (client-go and the rest, with -race): go commands running at
# once do not share their work, and on a cold machine each would compile
# the same packages beside the other.
e2e_built() {
	while [[ -n ${e2e_pid:-} ]] && [[ ! -e $work/built ]] && kill -0 "$e2e_pid" 2>/dev/null; do
		sleep 2
	done
}

# The tools modules (the image builder, the chart, the dashboards: modules
# of their own, for go-containerregistry, Helm's SDK, Grafana's foundation
# SDK and Prometheus' parser, out of the main go.mod) and the benchmarks'
# run (once each, none timed: a broken one fails here, not in make bench)
# are a lane of their own beside the others: on a cold machine they
# compile for about ten minutes, and ahead of the packages they held the
# packages' lane back by as much. -race, as the packages' tests, so the
# benchmarks share their compiles. STICKYDRAIN_LANES_TOOLS=0 (make
# test-e2e) leaves them out.
tools_pid=
tools_log=
if [[ ${STICKYDRAIN_LANES_TOOLS:-1} != 0 ]]; then
	tools_log=$(mktemp -t stickydrain-tools-lane.XXXXXX)
	tools_lane() {
		local st=0
		(cd tools/images && "$go_cmd" test -race -count=1 ./...) || st=1
		e2e_built
		(cd tools/helm && "$go_cmd" test -race -count=1 -timeout 20m ./...) || st=1
		(cd tools/dashboards && "$go_cmd" test -race -count=1 ./...) || st=1
		"$go_cmd" test -race -run '^$' -bench . -benchtime 1x ./webhook/inject ./webhook/admit ./controller/endpoints ./controller/plan ./drainctl/ || st=1
		return "$st"
	}
	echo "the tools modules' tests and the benchmarks run in a lane beside the others; their output ($tools_log) follows when they end"
	tools_lane >"$tools_log" 2>&1 &
	tools_pid=$!
fi
# On exit (an interrupt included), stop the lanes still running.
cleanup() {
	for pid in ${e2e_pid:-} ${tools_pid:-}; do
		pkill -TERM -P "$pid" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
	done
	[[ -n ${work:-} ]] && rm -rf "$work"
	[[ -n ${tools_log:-} ]] && rm -f "$tools_log"
	return 0
}
trap cleanup EXIT

status=0
if ((${#others[@]})); then
	e2e_built
	# Their test binaries first, compiled two at a time (-p 1 below would
	# compile them one at a time, on a cold machine twice as long) and
	# not run (-exec true): the run below then finds every package
	# compiled, and only links. A build failure shows in the run below.
	"$go_cmd" test -race -count=1 -run '^$' -exec true "${others[@]}" >/dev/null 2>&1 || true
	"$go_cmd" test -race -count=1 -p 1 -timeout "$timeout" "${others[@]}" || status=1
fi

if [[ -n $tools_pid ]]; then
	tools_status=0
	wait "$tools_pid" || tools_status=$?
	tools_pid=
	echo "=== the tools modules and the benchmarks"
	cat "$tools_log"
	if ((tools_status != 0)); then status=1; fi
fi
if [[ -n $e2e_pid ]]; then
	e2e_status=0
	wait "$e2e_pid" || e2e_status=$?
	e2e_pid=
	if ((e2e_status != 0)); then
		cat "$e2e_log"
		status=1
	else
		echo "test/e2e passed; each scenario's time:"
		grep -E '^(=== test/e2e|--- (PASS|SKIP)|PASS$)' "$e2e_log" || true
	fi
fi
exit "$status"
