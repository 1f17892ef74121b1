package manifests_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/test/promtool"
)

// TestAlertRules runs promtool's unit tests of the shipped alerts
// (monitoring/testdata/alerts-test.yaml: each alert firing and not) on the
// PrometheusRule's spec, after promtool's own check of the rules, and
// checks that every metric the rules name is one the binaries expose
// (docs/reference/metrics.md, generated from their code).
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &rule); err != nil || rule.Kind != "PrometheusRule" {
		t.Fatalf("monitoring/prometheusrule.yaml: kind %q, %v", rule.Kind, err)
	}
	groups, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	// The chart renders the same groups (from a file Helm does not
	// template: the annotations' {{ }} are Prometheus').
	chartRaw, err := os.ReadFile(filepath.Join("..", "charts", "stickydrain", "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart map[string]any
	if err := yaml.UnmarshalStrict(chartRaw, &chart); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(chart, rule.Spec) {
		t.Errorf("charts/stickydrain/files/alerts.yaml differs from monitoring/prometheusrule.yaml's spec")
	}
	dir := t.TempDir()
	tests, err := os.ReadFile(filepath.Join("monitoring", "testdata", "alerts-test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"rules.yaml": groups, "alerts-test.yaml": tests} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts-test.yaml"}} {
		cmd, err := promtool.Command(args...)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}

	// Every alert has a runbook in docs/operating.md and a test.
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		if !strings.Contains(string(doc), "### "+m[1]) {
			t.Errorf("alert %s has no runbook section (### %s) in docs/operating.md", m[1], m[1])
		}
		if !strings.Contains(string(tests), "alertname: "+m[1]) {
			t.Errorf("alert %s has no promtool test", m[1])
		}
	}
	metrics, err := os.ReadFile(filepath.Join("..", "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, m := range regexp.MustCompile(`\bstickydrain_[a-z_]+`).FindAllString(string(groups), -1) {
		if !slices.Contains(named, m) {
			named = append(named, m)
		}
	}
	for _, m := range named {
		if !strings.Contains(string(metrics), "`"+m+"`") {
			t.Errorf("the rules name %s, which no binary exposes (docs/reference/metrics.md)", m)
		}
	}
	if len(named) < 5 {
		t.Errorf("the rules name only %v", named)
	}
}
