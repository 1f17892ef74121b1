package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/stickydrain/stickydrain/api"
)

// PodStatus is one terminating opted-in pod's drain.
type PodStatus struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// Workload is the pod's owner as kind/name (a ReplicaSet's
	// Deployment), "" when it has none.
	Workload string `json:"workload,omitempty"`
	// Since is when the pod was deleted (its deletion timestamp less its
	// grace period); Deadline when the kubelet kills it (its deletion
	// timestamp).
	Since    time.Time `json:"drainingSince"`
	Deadline time.Time `json:"graceDeadline"`
	// Sessions is drainctl's latest count; nil when it has read none.
	Sessions *float64 `json:"sessionsLeft"`
	// MaxWait is the drain's max-wait as drainctl announced it, "" when
	// its log does not say.
	MaxWait string `json:"maxWait,omitempty"`
	// LoadBalancers are the upstreams the controller drained the pod's
	// server on, by its Events.
	LoadBalancers []LoadBalancerState `json:"loadBalancers"`
	// Verdict is the one-line answer: draining, drained, stopping,
	// released, stuck: …
	Verdict string `json:"verdict"`
	// LastLog is drainctl's latest line and its time.
	LastLog   string     `json:"lastLog,omitempty"`
	LastLogAt *time.Time `json:"lastLogAt,omitempty"`
}

// LoadBalancerState is the pod's server on one upstream.
type LoadBalancerState struct {
	Upstream string `json:"upstream"`
	// State is "draining" or "removed".
	State string `json:"state"`
	// Instances that had applied it, of the upstream's.
	Answered  int `json:"appliedOn"`
	Instances int `json:"instances"`
}

func (l LoadBalancerState) String() string {
	return fmt.Sprintf("%s %s %d/%d", l.Upstream, l.State, l.Answered, l.Instances)
}

// notDrainedAfter is how long a drain may go without any Draining Event
// before the verdict says so: the controller drains within a second or
// two (its propagation delay), a failover in 15 s.
const notDrainedAfter = 30 * time.Second

// Status lists the terminating opted-in pods of namespace ("": every
// namespace), by namespace and name.
func (c *Client) Status(ctx context.Context, namespace string) ([]PodStatus, error) {
	pods, err := c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var draining []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil && injected(p) {
			draining = append(draining, p)
		}
	}
	if len(draining) == 0 {
		return nil, nil
	}
	lbs, err := c.serverNotes(ctx, namespace, draining)
	if err != nil {
		return nil, err
	}
	now := c.now()
	out := make([]PodStatus, 0, len(draining))
	for _, p := range draining {
		s := PodStatus{Namespace: p.Namespace, Pod: p.Name, Workload: workload(p), Deadline: p.DeletionTimestamp.Time, LoadBalancers: lbs[p.UID]}
		s.Since = s.Deadline
		if p.DeletionGracePeriodSeconds != nil {
			s.Since = s.Deadline.Add(-time.Duration(*p.DeletionGracePeriodSeconds) * time.Second)
		}
		if s.LoadBalancers == nil {
			s.LoadBalancers = []LoadBalancerState{}
		}
		container, _ := drainContainer(p)
		var prog Progress
		logErr := error(nil)
		if container != "" {
			var text string
			if text, logErr = c.logs(ctx, p.Namespace, p.Name, container); logErr == nil {
				prog = ParseDrainLog(strings.NewReader(text))
			}
		}
		if prog.Sessions >= 0 && prog.Line != "" {
			n := prog.Sessions
			s.Sessions = &n
		}
		if prog.MaxWait > 0 {
			s.MaxWait = prog.MaxWait.String()
		}
		if prog.Line != "" {
			at := prog.At
			s.LastLog, s.LastLogAt = prog.Line, &at
		}
		s.Verdict = verdict(now, s, prog, container, logErr)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Pod < out[j].Pod
	})
	return out, nil
}

// serverNotes reads the controller's Draining and Removed Events on pods,
// by pod: per upstream, the note that reached the most instances, Removed
// over Draining. An Event names its pod by uid (the controller's since
// the EndpointSlice's targetRef carried it), else by name, when recorded
// after the pod was created (not an earlier pod's of the same name).
func (c *Client) serverNotes(ctx context.Context, namespace string, pods []*corev1.Pod) (map[types.UID][]LoadBalancerState, error) {
	byName := map[types.NamespacedName]*corev1.Pod{}
	for _, p := range pods {
		byName[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	best := map[types.UID]map[string]LoadBalancerState{}
	for _, reason := range []string{api.ReasonDraining, api.ReasonRemoved} {
		evs, err := c.Kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("reason", reason), fields.OneTermEqualSelector("involvedObject.kind", "Pod")).String(),
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s events: %w", reason, err)
		}
		for _, e := range evs.Items {
			n, ok := api.ParseServerNote(e.Reason, e.Message)
			if !ok {
				continue
			}
			st := LoadBalancerState{Upstream: n.Upstream, State: "draining", Answered: n.Answered, Instances: n.Instances}
			if n.Reason == api.ReasonRemoved {
				st.State = "removed"
			}
			uid := e.InvolvedObject.UID
			if uid == "" {
				p := byName[types.NamespacedName{Namespace: e.InvolvedObject.Namespace, Name: e.InvolvedObject.Name}]
				if p == nil || eventTime(&e).Before(p.CreationTimestamp.Time) {
					continue
				}
				uid = p.UID
			}
			byUpstream := best[uid]
			if byUpstream == nil {
				byUpstream = map[string]LoadBalancerState{}
				best[uid] = byUpstream
			}
			old, seen := byUpstream[n.Upstream]
			if !seen || (st.State == "removed" && old.State == "draining") || (st.State == old.State && st.Answered > old.Answered) {
				byUpstream[n.Upstream] = st
			}
		}
	}
	out := map[types.UID][]LoadBalancerState{}
	for uid, byUpstream := range best {
		for _, st := range byUpstream {
			out[uid] = append(out[uid], st)
		}
		sort.Slice(out[uid], func(i, j int) bool { return out[uid][i].Upstream < out[uid][j].Upstream })
	}
	return out, nil
}

// eventTime is when e was recorded: its eventTime (events.k8s.io), else
// its first timestamp (core/v1).
func eventTime(e *corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// workload is the pod's controller as kind/name: a ReplicaSet's
// Deployment by the pod-template-hash suffix.
func workload(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return ""
	}
	if ref.Kind == "ReplicaSet" {
		if h := p.Labels["pod-template-hash"]; h != "" && strings.HasSuffix(ref.Name, "-"+h) {
			return "deployment/" + strings.TrimSuffix(ref.Name, "-"+h)
		}
	}
	return strings.ToLower(ref.Kind) + "/" + ref.Name
}

// verdict is the one-line answer for a drain.
func verdict(now time.Time, s PodStatus, p Progress, container string, logErr error) string {
	switch {
	case container == "":
		return "stopping: no drainctl hook"
	case now.After(s.Deadline):
		return "stuck: past its grace period"
	case logErr != nil:
		return "unknown: log unreadable"
	}
	switch p.Phase {
	case PhaseDrained:
		return "drained, stopping"
	case PhaseReleased:
		return "released, stopping"
	case PhaseMaxWait:
		return "max-wait reached, stopping"
	case PhaseUnreachable:
		return "stuck: app unreachable"
	case PhaseInterrupted:
		return "interrupted, stopping"
	case PhaseNotStarted:
		return "starting"
	case PhaseFailing:
		return fmt.Sprintf("draining: %d polls failed in a row", p.Failures)
	}
	if len(s.LoadBalancers) == 0 && now.Sub(s.Since) > notDrainedAfter {
		return "draining: not drained on any load balancer"
	}
	for _, lb := range s.LoadBalancers {
		if lb.Answered < lb.Instances {
			return fmt.Sprintf("draining: %s on %d of %d instances", lb.Upstream, lb.Answered, lb.Instances)
		}
	}
	if p.Phase == PhaseHolding {
		return "draining: no sessions left, holding for min-wait"
	}
	return "draining"
}

// WriteTable writes statuses as kubectl writes a list: a header and one
// line each, the namespace column with allNamespaces only. Durations are
// counted from now.
func WriteTable(w io.Writer, statuses []PodStatus, allNamespaces bool, now time.Time) error {
	if len(statuses) == 0 {
		_, err := fmt.Fprintln(w, "No terminating opted-in pods.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	if allNamespaces {
		fmt.Fprint(tw, "NAMESPACE\t")
	}
	fmt.Fprintln(tw, "POD\tWORKLOAD\tDRAINING\tSESSIONS\tMAX-WAIT\tGRACE-LEFT\tLOAD-BALANCERS\tVERDICT")
	for _, s := range statuses {
		if allNamespaces {
			fmt.Fprintf(tw, "%s\t", s.Namespace)
		}
		sessions := "?"
		if s.Sessions != nil {
			sessions = fmt.Sprint(*s.Sessions)
		}
		var lbs []string
		for _, lb := range s.LoadBalancers {
			lbs = append(lbs, lb.String())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Pod, dash(s.Workload), age(now.Sub(s.Since)), sessions, dash(s.MaxWait),
			age(s.Deadline.Sub(now)), dash(strings.Join(lbs, ",")), s.Verdict)
	}
	return tw.Flush()
}

// WriteJSON writes statuses as one JSON document: {"pods": […]}.
func WriteJSON(w io.Writer, statuses []PodStatus) error {
	if statuses == nil {
		statuses = []PodStatus{}
	}
	return writeJSON(w, struct {
		Pods []PodStatus `json:"pods"`
	}{statuses})
}

// writeJSON writes v as indented JSON, as kubectl -o json does.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// age is d as kubectl prints ages: 45s, 3m10s, 2h5m; negative is 0s.
func age(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d <= 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
}
