package manifests_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is a markdown link's target: [text](target).
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// repoPath is a path of the repository named in running text,
	// `docs/install.md` or manifests/samples/haproxy: not part of a URL or
	// of a longer path (what precedes it is no word character, dot, slash
	// or hyphen).
	repoPath = regexp.MustCompile(`(?:^|[^\w./-])((?:docs|manifests|charts)/[\w./-]*)`)
)

// TestDocLinks fails when a page a user reads — README.md, the files every
// project has, docs/ and its reference, the chart's values comments and
// NOTES.txt — names a file or directory of the repository that does not
// exist: a markdown link (resolved against the page's own directory) or a
// path written out (docs/…, manifests/…, charts/…, resolved against the
// repository's root). Anchors are not checked.
func TestDocLinks(t *testing.T) {
	root := ".."
	pages := []string{"README.md", "CHANGELOG.md", "SECURITY.md", "CONTRIBUTING.md",
		"charts/stickydrain/values.yaml", "charts/stickydrain/templates/NOTES.txt"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			pages = append(pages, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	exists := func(path string) bool {
		_, err := os.Stat(path)
		return err == nil
	}
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		text := string(raw)
		if strings.HasSuffix(page, ".yaml") {
			text = comments(text) // values are the schema's; only what a comment names
		}
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if !exists(filepath.Join(root, filepath.Dir(page), target)) {
				t.Errorf("%s links to %s, which does not exist", page, m[1])
			}
		}
		for _, m := range repoPath.FindAllStringSubmatch(text, -1) {
			path := strings.TrimRight(m[1], "./")
			if !strings.Contains(path, "/") {
				continue // "docs/" alone, or a glob such as docs/*.md
			}
			checked++
			if !exists(filepath.Join(root, path)) {
				t.Errorf("%s names %s, which does not exist", page, path)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links and paths; the patterns find almost none?", checked)
	}
}

// comments is the text of a YAML file's comments, one a line.
func comments(yaml string) string {
	var b strings.Builder
	for _, l := range strings.Split(yaml, "\n") {
		if _, c, ok := strings.Cut(l, "#"); ok {
			b.WriteString(c)
			b.WriteString("\n")
		}
	}
	return b.String()
}
