package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// TestTheDashboardIsGeneratedAndItsQueriesHold: the committed JSON is what
// the code writes (make docs), every query parses with Prometheus' own
// parser, and names only metrics of docs/reference/metrics.md — the
// reference tools/docgen generates from the binaries' registries, itself
// checked against the code by a test.
func TestTheDashboardIsGeneratedAndItsQueriesHold(t *testing.T) {
	want, err := Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range Outputs {
		got, err := os.ReadFile(filepath.Join("..", "..", out))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what the code writes (%v): run make docs", out, err)
		}
	}
	reference, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(want, &d); err != nil {
		t.Fatal(err)
	}
	queries := 0
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			queries++
			// Grafana's own variable, as Grafana substitutes it.
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(strings.ReplaceAll(target.Expr, "$__rate_interval", "5m"))
			if err != nil {
				t.Errorf("panel %q: %q does not parse: %v", p.Title, target.Expr, err)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				name := vs.Name
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && strings.Contains(string(reference), "`"+base+"` | histogram") {
						name = base
					}
				}
				if !strings.Contains(string(reference), "`"+name+"`") {
					t.Errorf("panel %q names %s, which no binary exposes (docs/reference/metrics.md)", p.Title, vs.Name)
				}
				return nil
			})
		}
	}
	if queries < 10 {
		t.Errorf("%d queries; the dashboard lost its panels", queries)
	}
}
