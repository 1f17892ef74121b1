package manifests_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The HAProxy configuration and the systemd drop-in that
// docs/load-balancer-lifecycle.md shows are the shipped ones: every line of
// its code blocks that looks like haproxy.cfg or a unit file's line is in
// the sample it quotes, so the page cannot drift from what the tests run.
func TestTheLifecycleDocQuotesTheSamples(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	root := filepath.Join("..")
	doc := read(filepath.Join(root, "docs", "load-balancer-lifecycle.md"))
	samples := read(filepath.Join(root, "manifests", "samples", "haproxy", "haproxy.cfg")) +
		read(filepath.Join(root, "manifests", "samples", "haproxy-vm", "stickydrain.conf"))
	have := map[string]bool{}
	for _, l := range strings.Split(samples, "\n") {
		have[strings.Join(strings.Fields(l), " ")] = true
	}
	checked := 0
	open, plain := false, false // in a code block; one without a language (config text)
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			open, plain = !open, strings.TrimPrefix(l, "```") == ""
			continue
		}
		line := strings.Join(strings.Fields(l), " ")
		if !open || !plain || line == "" {
			continue
		}
		// haproxy.cfg directives (indented) and unit-file lines.
		if !strings.HasPrefix(l, "    ") && !strings.HasPrefix(line, "ExecReload=") {
			continue
		}
		if strings.HasPrefix(line, "/stickydrain-haproxy") || strings.HasPrefix(line, "--") {
			continue // the sidecar's command, shown wrapped
		}
		code, _, _ := strings.Cut(line, " # ")
		checked++
		if !have[strings.TrimSpace(code)] {
			t.Errorf("docs/load-balancer-lifecycle.md shows %q, which no shipped sample has", code)
		}
	}
	if checked < 10 {
		t.Errorf("only %d configuration lines checked: the page's code blocks were not found", checked)
	}
}
