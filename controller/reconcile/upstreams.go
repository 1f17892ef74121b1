package reconcile

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/controller/config"
)

// upstreamRef names one upstream of one load balancer, "<lb>/<upstream>".
type upstreamRef struct{ LB, Upstream string }

func (u upstreamRef) String() string { return u.LB + "/" + u.Upstream }

// ParseUpstreams reads the stickydrain.io/upstreams annotation: its
// distinct entries, in their order, at most api.MaxUpstreams of them.
func ParseUpstreams(v string, cfg *config.Config) ([]upstreamRef, error) {
	var out []upstreamRef
	for _, part := range upstreamKeys(v) {
		if len(out) == api.MaxUpstreams {
			return nil, fmt.Errorf("annotation %s: more than %d distinct upstreams; want at most %d (map more with another Service)", api.AnnotationUpstreams, api.MaxUpstreams, api.MaxUpstreams)
		}
		lb, up, ok := strings.Cut(part, "/")
		if !ok || lb == "" || !config.UpstreamNameRE.MatchString(up) || len(up) > api.MaxUpstreamName {
			return nil, fmt.Errorf("annotation %s: %.120q is not <lb>/<upstream> (an upstream name is up to %d letters, digits, _ . : -)", api.AnnotationUpstreams, part, api.MaxUpstreamName)
		}
		found := false
		for _, l := range cfg.LoadBalancers {
			found = found || l.Name == lb
		}
		if !found {
			return nil, fmt.Errorf("annotation %s: no load balancer %q in the configuration", api.AnnotationUpstreams, lb)
		}
		out = append(out, upstreamRef{lb, up})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("annotation %s is empty; want <lb>/<upstream>", api.AnnotationUpstreams)
	}
	return out, nil
}

// Indexes of Services: by each "<lb>/<upstream>" they map, and by each
// load balancer they map onto.
const (
	indexUpstream = "stickydrain.io/upstream"
	indexLB       = "stickydrain.io/lb"
	// indexService indexes EndpointSlices by the Service they belong to
	// (their kubernetes.io/service-name label): a pass reads its own
	// Service's few slices, not every slice of the namespace through a
	// label match.
	indexService = "stickydrain.io/service"
)

// byUpstream indexes a Service by each "<lb>/<upstream>" it maps.
func byUpstream(o client.Object) []string {
	return upstreamKeys(o.GetAnnotations()[api.AnnotationUpstreams])
}

// upstreamKeys are the distinct "<lb>/<upstream>" entries of an upstreams
// annotation, unvalidated (ParseUpstreams validates), in their order: at
// most api.MaxUpstreams+1 of them, so that an annotation of thousands
// costs the cache's indexes no more than one over the bound (which
// ParseUpstreams then refuses).
func upstreamKeys(v string) []string {
	var out []string
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" && !slices.Contains(out, part) {
			out = append(out, part)
			if len(out) > api.MaxUpstreams {
				break
			}
		}
	}
	return out
}
