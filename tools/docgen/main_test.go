package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReferenceIsUpToDate: the committed docs/reference is what `make
// docs` writes from the code now; change the code, run make docs.
func TestReferenceIsUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	root := filepath.Join("..", "..")
	out := t.TempDir()
	if err := generate(root, out); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadDir(filepath.Join(root, "docs", "reference"))
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) != len(entries) {
		t.Errorf("docs/reference holds %d files, make docs writes %d", len(committed), len(entries))
	}
	for _, e := range entries {
		want, _ := os.ReadFile(filepath.Join(out, e.Name()))
		got, err := os.ReadFile(filepath.Join(root, "docs", "reference", e.Name()))
		if err != nil || string(got) != string(want) {
			t.Errorf("docs/reference/%s differs from what the code says: run make docs", e.Name())
		}
	}
}
