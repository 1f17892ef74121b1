package podinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	// As the kubelet writes it: sorted keys, values quoted with %q.
	in := "kubectl.kubernetes.io/default-container=\"app\"\nstickydrain.io/max-wait=\"30m\"\nnote=\"line\\nbreak \\\"quoted\\\"\"\n"
	got, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"kubectl.kubernetes.io/default-container": "app",
		"stickydrain.io/max-wait":                 "30m",
		"note":                                    "line\nbreak \"quoted\"",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if _, err := Parse([]byte("novalue\n")); err == nil {
		t.Error("Parse accepted a line without =")
	}
	if _, err := Parse([]byte("k=unquoted\n")); err == nil {
		t.Error("Parse accepted an unquoted value")
	}
}

// TestReadIsBounded: the annotations file is read every second; one
// larger than any the kubelet writes (or a device named by mistake) is an
// error, not read whole.
func TestReadIsBounded(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines int) string {
		p := filepath.Join(dir, name)
		var b strings.Builder
		for i := range lines {
			fmt.Fprintf(&b, "example.com/note-%d=%q\n", i, strings.Repeat("\x00", 250))
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name   string
		path   string
		errHas string
	}{
		// 256 KiB of annotations (the API server's limit) of bytes %q
		// writes 4 bytes each: about 1 MiB.
		{name: "reads a file of the largest annotations the API server stores", path: write("large", 1000)},
		{name: "refuses a file over the bound", path: write("huge", 5000), errHas: "larger than " + strconv.Itoa(maxFile) + " bytes"},
		{name: "refuses an endless file", path: "/dev/zero", errHas: "larger than " + strconv.Itoa(maxFile) + " bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(tt.path)
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("Read(): %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), tt.path) {
				t.Fatalf("Read() error = %v, want one naming %s and containing %q", err, tt.path, tt.errHas)
			}
		})
	}
}
