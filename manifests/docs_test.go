package manifests_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
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

// Every controller configuration the docs show parses as the controller
// parses it, and every test the threat model cites exists.
func TestTheDocsConfigurationsParseAndTheThreatModelsTestsExist(t *testing.T) {
	root := filepath.Join("..")
	parsed := 0
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var block []string
		open := false
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(l, "```") && !open:
				open, block = strings.TrimPrefix(l, "```") == "yaml", nil
			case strings.HasPrefix(l, "```"):
				open = false
				if len(block) > 0 && strings.HasPrefix(block[0], "loadBalancers:") {
					parsed++
					if _, err := config.Parse([]byte(strings.Join(block, "\n")), drivers.New()); err != nil {
						t.Errorf("%s: a configuration shown does not parse: %v\n%s", page, err, strings.Join(block, "\n"))
					}
				}
			case open:
				block = append(block, l)
			}
		}
	}
	if parsed < 3 {
		t.Errorf("found %d configurations in README.md and docs/; want at least 3", parsed)
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	for _, dir := range []string{"api", "controller", "drainctl", "internal", "manifests", "test", "tools", "webhook"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, "_test.go") {
				b, _ := os.ReadFile(path)
				sources.Write(b)
			}
			return nil
		})
	}
	cited := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(cited) < 6 {
		t.Fatalf("docs/security.md cites %d tests; want the test behind each mitigation", len(cited))
	}
	for _, m := range cited {
		if !strings.Contains(sources.String(), "func "+m[1]+"(") {
			t.Errorf("docs/security.md cites %s, which no test file defines", m[1])
		}
	}
}

// Every relative link of the documentation resolves to a file or
// directory of the repository.
func TestRelativeLinksResolve(t *testing.T) {
	root := filepath.Join("..")
	var pages []string
	for _, glob := range []string{"*.md", "docs/*.md", "docs/*/*.md", "manifests/*.md", "bench/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
	}
	if checked < 5 {
		t.Errorf("checked %d relative links; the pattern finds none?", checked)
	}
}
