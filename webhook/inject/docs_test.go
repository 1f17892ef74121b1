package inject

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/api"
)

// TestTheDocsWorkloadsResolve resolves every workload shown in
// docs/opting-in.md with the webhook's own parser, as admission would:
// an annotation a page shows and the webhook would refuse (or that leaves
// the drain without its session URL) fails here.
func TestTheDocsWorkloadsResolve(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "opting-in.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(raw), -1)
	checked := 0
	for _, b := range blocks {
		if !strings.Contains(b[1], "kind: Deployment") {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(b[1]), &d); err != nil {
			t.Errorf("docs/opting-in.md: a Deployment shown does not parse: %v\n%s", err, b[1])
			continue
		}
		spec := d.Spec.Template.Spec
		if len(spec.Containers) == 0 {
			// The pages show metadata only: any app container.
			spec.Containers = []corev1.Container{{Name: "app", Image: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{}}}
		}
		ann := d.Spec.Template.Annotations
		plan, err := Resolve(&spec, func(k string) (string, bool) { v, ok := ann[k]; return v, ok })
		if err != nil {
			t.Errorf("docs/opting-in.md: the webhook refuses %v: %v", ann, err)
			continue
		}
		if ann[api.AnnotationURL] == "" {
			t.Errorf("docs/opting-in.md: an example without %s (a timed drain)", api.AnnotationURL)
		}
		checked++
		t.Logf("%s: %s", ann[api.AnnotationURL], strings.Join(plan.WaitArgs, " "))
	}
	if checked < 4 {
		t.Errorf("checked %d workloads of docs/opting-in.md, want the Tomcat, Spring Boot, WildFly and PHP examples at least", checked)
	}
}

// TestTheDocsWarningsAreTheWebhooksOwn: every "Warning: stickydrain: …"
// line that README.md or docs/ shows as kubectl's output is one the
// webhook writes for the quick start's Deployment without its session URL
// (the default max-wait, no readiness probe, no port), word for word.
func TestTheDocsWarningsAreTheWebhooksOwn(t *testing.T) {
	pod := basePod(func(p *corev1.Pod) {
		delete(p.Annotations, api.AnnotationURL)
		delete(p.Annotations, api.AnnotationContext)
		delete(p.Annotations, api.AnnotationMaxWait)
	})
	res, err := Inject(pod, optedNS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, w := range res.Warnings {
		written["Warning: "+w] = true
	}
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	shown := 0
	for _, page := range append(pages, filepath.Join("..", "..", "README.md")) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(l, "Warning: stickydrain:") {
				continue
			}
			shown++
			if !written[l] {
				t.Errorf("%s shows a warning the webhook does not write:\n%s\nit writes:\n%s", page, l, strings.Join(res.Warnings, "\n"))
			}
		}
	}
	if shown < 2 {
		t.Errorf("README.md and docs/ show %d of the webhook's warnings; want the quick start's at least", shown)
	}
}
