// Command demo shows stickydrain keeping every session through a rolling
// update, on a local control plane: `make demo`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stickydrain/stickydrain/internal/cmdline"
	"github.com/stickydrain/stickydrain/test/e2e"
)

const (
	replicas = 3
	users    = 12
	idle     = 10 * time.Second
)

const synopsis = `demo [--lb haproxy|haproxy-ingress|traefik] [--node podhost|real]

A rolling update of a session-bound app on a local control plane, with
users holding sessions all along: behind two HAProxy instances that the
stickydrain controller drains (the default), or behind haproxy-ingress or
Traefik with the webhook alone (built from source on first use). The pods
run under the tests' pod host (the default), or with --node real on a real
kubelet, containerd and runc from the images built here. Needs root.`

func main() {
	fs := cmdline.New("demo")
	lb := fs.String("lb", "haproxy", "the proxy before the pods: haproxy (two instances and the stickydrain controller), haproxy-ingress or traefik (the webhook alone)")
	nodeKind := fs.String("node", "podhost", "what runs the pods: podhost (the tests' kubelet stand-in) or real (a kubelet on containerd and runc, from images built here)")
	if status, ok := cmdline.Parse(fs, synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	opts := e2e.Options{Log: say, OwnSignals: true}
	switch *nodeKind {
	case "podhost":
	case "real":
		opts.Node = true
	default:
		fmt.Fprintf(os.Stderr, "demo: --node: %q is not one of podhost, real\n", *nodeKind)
		os.Exit(cmdline.ExitUsage)
	}
	switch *lb {
	case "haproxy":
	case string(e2e.HAProxyIngress), string(e2e.Traefik):
		opts.Ingress = e2e.Ingress(*lb)
	default:
		fmt.Fprintf(os.Stderr, "demo: --lb: %q is not one of haproxy, haproxy-ingress, traefik\n", *lb)
		os.Exit(cmdline.ExitUsage)
	}
	if opts.Node && *lb != "haproxy" {
		fmt.Fprintf(os.Stderr, "demo: --node real runs behind --lb haproxy only (the ingress demos run on the pod host)\n")
		os.Exit(cmdline.ExitUsage)
	}
	os.Exit(run(opts))
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(opts e2e.Options) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: needs root (the pod host makes network namespaces and mounts); run it as root")
		return 2
	}
	// The control plane's own library logs are not the demo's story (and
	// unset, controller-runtime prints a stack trace about it).
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	front := "two HAProxy instances"
	if opts.Ingress != "" {
		front = string(opts.Ingress) + " (the webhook alone, no stickydrain controller)"
	}
	where := "pods under the pod host"
	if opts.Node {
		where = "pods on a real kubelet, containerd and runc"
	}
	say("stickydrain demo: a rolling update of a session-bound app behind %s, %s", front, where)
	env, err := e2e.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	defer func() {
		say("cleaning up (processes, namespaces, bridge, files) …")
		env.Stop()
		say("done")
	}()
	if opts.Ingress != "" {
		say("deploying: Namespace %s opted in (stickydrain.io/drain=enabled), an Ingress with %s's cookie affinity, %d pods of sessionapp v1", e2e.Namespace, opts.Ingress, replicas)
	} else {
		say("deploying: Namespace %s opted in (stickydrain.io/drain=enabled), Service mapped to edge/shop, %d pods of sessionapp v1", e2e.Namespace, replicas)
	}
	if err := env.Deploy(ctx, replicas, idle); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	if !waitFor(ctx, env, func() bool { return env.RolloutDone(ctx, "v1", replicas) && allActive(env.Pods(ctx)) }, 2*time.Minute) {
		return 1
	}
	obs := env.Observe(ctx, 100*time.Millisecond)
	clients := env.StartClients(ctx, users, idle, obs)
	say("%d users log in through %s and browse; sessions idle out after %s", users, front, idle)
	lbColumn := "HAPROXY-1 / HAPROXY-2"
	if opts.Ingress != "" {
		lbColumn = strings.ToUpper(string(opts.Ingress)) + "'S VIEW"
	}
	view := func(ctx context.Context, env *e2e.Env, c *e2e.Clients, d time.Duration) {
		show(ctx, env, c, d, lbColumn)
	}
	view(ctx, env, clients, 8*time.Second)
	say("rolling out v2 (maxSurge 1, maxUnavailable 0) …")
	start := time.Now()
	clients.RolloutStarted()
	if err := env.Rollout(ctx, "v2"); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	for ctx.Err() == nil && !env.RolloutDone(ctx, "v2", replicas) && time.Since(start) < 10*time.Minute {
		view(ctx, env, clients, 2*time.Second)
	}
	if ctx.Err() != nil {
		say("interrupted")
		return 130
	}
	took := time.Since(start)
	say("rollout complete in %s; letting the users finish their sessions …", took.Round(time.Second))
	clients.StopNewSessions()
	view(ctx, env, clients, time.Second)
	return verdict(clients.Stats(), obs.Records(), clients.Problems(), took, front)
}

func allActive(pods []e2e.PodView) bool {
	for _, p := range pods {
		for _, s := range p.LB {
			if s != "active" {
				return false
			}
		}
		if len(p.LB) == 0 {
			return false
		}
	}
	return len(pods) > 0
}

func waitFor(ctx context.Context, env *e2e.Env, cond func() bool, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for !cond() {
		if ctx.Err() != nil || time.Now().After(deadline) {
			say("not ready in time; see %s", env.Dir)
			return false
		}
		time.Sleep(300 * time.Millisecond)
	}
	return true
}

// show prints the live table every second for d.
func show(ctx context.Context, env *e2e.Env, c *e2e.Clients, d time.Duration, lbColumn string) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		pods := env.Pods(ctx)
		s := c.Stats()
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s  %-28s %-4s %-12s %-15s %-8s %s\n", time.Now().Format("15:04:05"), "POD", "VER", "STATUS", "IP", "SESSIONS", lbColumn)
		for _, p := range pods {
			status := "starting"
			switch {
			case p.Terminating:
				status = "terminating"
			case p.Ready:
				status = "ready"
			}
			sessions := "-"
			if p.Sessions >= 0 {
				sessions = fmt.Sprint(p.Sessions)
			}
			fmt.Fprintf(&b, "          %-28s %-4s %-12s %-15s %-8s %s\n", p.Name, p.Version, status, p.IP, sessions, strings.Join(p.LB, " / "))
		}
		fmt.Fprintf(&b, "          clients: %d requests, %d sessions ended (%d kept), %d misrouted, %d errors\n",
			s.Requests, s.Sessions, s.SessionsKept, s.Misrouted, s.Errors)
		fmt.Print(b.String())
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func verdict(s e2e.Stats, drains []e2e.DrainRecord, problems []string, took time.Duration, front string) int {
	fmt.Println()
	say("VERDICT")
	fmt.Printf("  sessions ended:        %d, kept on their pod to the end: %d\n", s.Sessions, s.SessionsKept)
	fmt.Printf("  requests:              %d, misrouted: %d, errors: %d\n", s.Requests, s.Misrouted, s.Errors)
	fmt.Printf("  sessions started after the rollout began: %d (%d on v2); new sessions on a draining pod: %d\n", s.StartedAfterRollout, s.OnNewVersion, s.NewOnDraining)
	fmt.Printf("  logouts on a draining pod followed by a login: %d, of which back on a draining pod: %d\n", s.Relogins, s.ReloginsOnDraining)
	for _, d := range drains {
		drained, gone := "never", "still there"
		if !d.Drained.IsZero() {
			drained = d.Drained.Sub(d.Seen).Round(time.Millisecond).String()
		}
		if !d.Gone.IsZero() {
			gone = d.Gone.Sub(d.Deleted).Round(100 * time.Millisecond).String()
		}
		fmt.Printf("  %s: draining on %s %s after it was first seen terminating (sampled every 100ms); gone %s after its deletion, when its last session ended; server dropped early: %v\n", d.Pod, front, drained, gone, d.ServerDroppedEarly)
	}
	fmt.Printf("  rollout took %s\n", took.Round(time.Second))
	for _, p := range problems {
		fmt.Println("  problem:", p)
	}
	ok := s.Misrouted == 0 && s.Errors == 0 && s.NewOnDraining == 0 && s.ReloginsOnDraining == 0 && s.Sessions == s.SessionsKept
	for _, d := range drains {
		ok = ok && !d.ServerDroppedEarly && !d.Drained.IsZero()
	}
	if ok {
		say("every session was kept: zero misrouted, zero errors")
		return 0
	}
	say("sessions were NOT all kept")
	return 1
}
