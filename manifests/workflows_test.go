package manifests_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every action a workflow uses is pinned by its full commit (a tag can be
// moved to other code; the release job holds packages: write and
// id-token: write), the tag it was in a comment beside it.
func TestWorkflowActionsArePinnedByCommit(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", ".github", "workflows", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no workflows found: %v", err)
	}
	uses := regexp.MustCompile(`^\s*-?\s*uses:\s*(\S+)(.*)$`)
	pinned := regexp.MustCompile(`^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$`)
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			m := uses.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(m[1], "./") {
				continue
			}
			n++
			if !pinned.MatchString(m[1]) {
				t.Errorf("%s:%d: %s is not pinned by a full commit SHA", filepath.Base(f), i+1, m[1])
			}
			if !regexp.MustCompile(`#\s*v\d`).MatchString(m[2]) {
				t.Errorf("%s:%d: %s has no '# vX.Y.Z' comment naming its tag", filepath.Base(f), i+1, m[1])
			}
		}
	}
	if n == 0 {
		t.Error("no action found in the workflows: the test reads nothing")
	}
}
