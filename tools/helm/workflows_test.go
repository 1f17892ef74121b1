package helm

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/rhysd/actionlint"
)

// The workflows that test, build and publish a release (the images, the
// chart) pass actionlint: expressions, job outputs, permissions and the
// actions' inputs are checked before a tag finds a mistake.
func TestTheWorkflowsPassActionlint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", ".github", "workflows", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows: %v %v", files, err)
	}
	l, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := l.LintFiles(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", filepath.Base(e.Filepath), e.Line, e.Column, e.Message, e.Kind)
	}
}

// The check can fail: a job that reads an output its needs do not have.
func TestActionlintSeesAMistake(t *testing.T) {
	l, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad := []byte("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ needs.b.outputs.x }}\n")
	errs, err := l.Lint("bad.yaml", bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 {
		t.Error("actionlint found nothing wrong in a job reading another job's output it does not need")
	}
}
