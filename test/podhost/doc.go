// Package podhost runs Pods for real without a kubelet or a container
// runtime, faithfully enough that what the stickydrain webhook injects
// (init containers, volumes, mounts, preStop hooks, grace periods) runs as
// in a real cluster. Tests start a Host beside test/cluster.
//
// What it does, as the kubelet (and the scheduler) would:
//   - binds unscheduled pods (default scheduler) to one of its Nodes;
//   - gives each pod a network namespace with an IP from its own /24 of
//     198.18.0.0/15 on a bridge it creates, so localhost in the pod is the
//     pod and the host reaches the pod at its IP;
//   - runs init containers in order, then the containers, each in its own
//     mount and PID namespace inside the pod's network namespace, its
//     command PID 1 (so /proc/1/fd/1 is its stdout), with the container's
//     command, args, env (values, $(VAR) expansion, downward-API fieldRefs),
//     working directory and volume mounts (emptyDir; downwardAPI files for
//     labels and annotations, written atomically and rewritten when they
//     change); images map to local executables through Options.Images;
//   - runs readiness probes (httpGet, tcpSocket, exec) and reports phase,
//     pod IPs, container statuses, restarts per restartPolicy and the
//     PodScheduled, Initialized, ContainersReady and Ready conditions;
//   - on graceful deletion runs each container's preStop hook (exec inside
//     the container's namespaces, or httpGet) bounded by the grace period,
//     then SIGTERM, then SIGKILL once the rest of the grace period — at least
//     2 s, the kubelet's one-off minimum after a long hook — has passed, then
//     deletes the Pod with grace 0;
//   - records each step with its time (and the hook's exit status) in a
//     timeline tests assert on.
//
// What it does not do: pull images, configMap, secret, projected or
// persistent volumes, liveness and startup probes, resource limits, sidecar
// (restartable) init containers, ephemeral containers, host networking.
// A pod asking for them is left Pending with a message saying so. Downward-API
// files are rewritten at once on change, where the kubelet takes up to its
// sync period (about a minute).
//
// It needs root (network namespaces, bind mounts) and iproute2 and
// util-linux (test/deps.sh installs them). Stop kills every process and
// removes every namespace, device, directory and mount point it made; a
// watchdog process does the same if the test process dies without Stop.
package podhost
