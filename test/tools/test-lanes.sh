#!/usr/bin/env bash
# Runs make test's Go tests in two lanes at once: the end-to-end package
# (test/e2e: its scenarios spend most of their time waiting for drains) in
# one, the scenarios named in E2E_LAST (the soak) last; every other
# package — and the image builder's, the chart's and the benchmarks'
# tests — one after another in the other, followed by the end-to-end
# scenarios named in E2E_SECOND_LANE (four pod-host scenarios by default). Each lane runs one
# process at a time, with its own control planes; the machine-wide parts
# they share are locked (cluster.LockRealNode, the pod hosts' subnets and
# mount points). The first lane's output is kept in a file and printed
# when both lanes end; the run fails if either lane did.
#
# Usage: test/tools/test-lanes.sh GO TIMEOUT PKGS...   (the environment
# carries STICKYDRAIN_K8S_BINS and the others, as make test sets them)
set -euo pipefail
go_cmd=$1 timeout=$2
shift 2
cd "$(dirname "$0")/../.."

e2e=github.com/stickydrain/stickydrain/test/e2e
mapfile -t pkgs < <("$go_cmd" list "$@")
others=()
run_e2e=false
for p in "${pkgs[@]}"; do
	if [[ $p == "$e2e" ]]; then run_e2e=true; else others+=("$p"); fi
done

# Four scenarios on the pod host (none holds the real node) by default:
# measured at efa999e, the first lane (test/e2e 1,510 s, then the soak
# 179 s) ended about 8 minutes after the second. Moving the ingress
# scenarios over instead (tried at 2d6a031) made the second lane the
# longer: its real-node packages waited for the machine's real node while
# a first-lane scenario held it. E2E_SECOND_LANE= (empty) keeps every
# scenario in the first lane.
second=${E2E_SECOND_LANE-'^(TestUninstallInOrderLosesNoRequest|TestRolloutAlsoDrainsOnNGINXPlus|TestRolloutSurvivesALeaderCrash|TestRolloutSurvivesAControlPlaneRestart)$'}
# Scenarios the first lane runs last, after the rest of test/e2e: by then
# the second lane is usually done, and the soak's random faults (leader
# kills, partitions, crashes in two minutes) run on a quiet machine.
last=${E2E_LAST-'^TestSoak$'}
skip=
for re in "$second" "$last"; do
	if [[ -n $re ]]; then skip+="${skip:+|}($re)"; fi
done
# The first lane runs with -v, so that each scenario's time is in its log
# (to balance the lanes by); when it passes, only those lines are shown.
first_lane() {
	local st=0
	if [[ -n $skip ]]; then
		"$go_cmd" test -v -race -count=1 -timeout "$timeout" -skip "$skip" "$e2e" || st=1
	else
		"$go_cmd" test -v -race -count=1 -timeout "$timeout" "$e2e" || st=1
	fi
	if [[ -n $last ]]; then
		"$go_cmd" test -v -race -count=1 -timeout "$timeout" -run "$last" "$e2e" || st=1
	fi
	return "$st"
}
e2e_log=$(mktemp -t stickydrain-e2e.XXXXXX)
e2e_pid=
if $run_e2e; then
	echo "test/e2e runs beside the other packages; its output ($e2e_log) follows when both end"
	first_lane >"$e2e_log" 2>&1 &
	e2e_pid=$!
	trap '[[ -n $e2e_pid ]] && { pkill -TERM -P "$e2e_pid"; kill "$e2e_pid"; } 2>/dev/null' EXIT
fi

status=0
# The image builder and the chart's tests are modules of their own
# (go-containerregistry; Helm's SDK; Grafana's foundation SDK and Prometheus' parser), out of the main go.mod.
(cd tools/images && "$go_cmd" test -race -count=1 ./...) || status=1
(cd tools/helm && "$go_cmd" test -race -count=1 -timeout 20m ./...) || status=1
(cd tools/dashboards && "$go_cmd" test -race -count=1 ./...) || status=1
# The Go benchmarks make bench runs, once each (none timed): a broken one
# fails here, not in make bench.
"$go_cmd" test -run '^$' -bench . -benchtime 1x ./webhook/inject ./webhook/admit ./controller/endpoints ./controller/plan ./drainctl/ || status=1
if ((${#others[@]})); then
	"$go_cmd" test -race -count=1 -p 1 -timeout "$timeout" "${others[@]}" || status=1
fi
if $run_e2e && [[ -n $second ]]; then
	"$go_cmd" test -race -count=1 -timeout "$timeout" -run "$second" "$e2e" || status=1
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
		grep -E '^(--- (PASS|SKIP)|ok|PASS$)' "$e2e_log" || true
	fi
	rm -f "$e2e_log"
fi
exit "$status"
