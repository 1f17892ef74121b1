package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func fakeProc(t *testing.T, procs map[int][2]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (%s) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %s 0 0", pid, "a (weird) name", p[1])
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(p[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil { // not a PID
		t.Fatal(err)
	}
	return root
}

func TestMainProcess(t *testing.T) {
	const pause, app, sidecar = "0::/kubepods/pod1/pause\n", "0::/kubepods/pod1/app\n", "0::/kubepods/pod1/sidecar\n"
	tests := []struct {
		name  string
		procs map[int][2]string
		self  int
		want  int
	}{
		{"own PID namespace: PID 1", map[int][2]string{1: {app, "100"}, 40: {app, "900"}}, 40, 1},
		{"shared PID namespace: the container's oldest process", map[int][2]string{
			1: {pause, "10"}, 7: {app, "100"}, 9: {sidecar, "90"}, 15: {app, "400"}, 40: {app, "50"}}, 40, 7},
		{"start times tie: the lower PID", map[int][2]string{1: {pause, "10"}, 8: {app, "100"}, 7: {app, "100"}, 40: {app, "900"}}, 40, 7},
	}
	for _, tt := range tests {
		root := fakeProc(t, tt.procs)
		got, err := mainProcess(root, tt.self)
		if err != nil || got != tt.want {
			t.Errorf("%s: %d, %v; want %d", tt.name, got, err, tt.want)
		}
	}
	root := fakeProc(t, map[int][2]string{1: {pause, "10"}, 40: {app, "900"}})
	if _, err := mainProcess(root, 40); err == nil {
		t.Error("alone in its cgroup: want an error")
	}
}
