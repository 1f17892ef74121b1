package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// asDemo, set in a child's environment, makes this test binary the demo
// itself: the tests run the demo's main without linking a second binary
// (built with the same flags, -race included, as the tests).
const asDemo = "STICKYDRAIN_TEST_RUN_DEMO"

func TestMain(m *testing.M) {
	if os.Getenv(asDemo) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// demo is the command that runs the demo with args.
func demo(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asDemo+"=1")
	return cmd
}

// TestTheDemoKeepsEverySession runs `make demo`'s command as a newcomer
// would, the demo with its default --lb: it must end with the
// verdict that every session was kept, exit 0, and print nothing from
// the libraries underneath (no stack trace, no "SetLogger").
func TestTheDemoKeepsEverySession(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a control plane (-short)")
	}
	out, err := demo().CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, text)
	}
	for _, want := range []string{"VERDICT", "every session was kept: zero misrouted, zero errors", "done"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, text)
		}
	}
	for _, noise := range []string{"goroutine ", "SetLogger", "panic", "WARNING: DATA RACE"} {
		if strings.Contains(text, noise) {
			t.Errorf("the demo's output carries %q:\n%s", noise, text)
		}
	}
	t.Logf("the demo's last lines:\n%s", lastLines(text, 12))
}

func TestTheDemosCommandLine(t *testing.T) {
	out, err := demo("--lb", "nginx").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `--lb: "nginx" is not one of haproxy, haproxy-ingress, traefik`) {
		t.Errorf("--lb nginx: %v\n%s", err, out)
	}
	out, err = demo("--node", "kind").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `--node: "kind" is not one of podhost, real`) {
		t.Errorf("--node kind: %v\n%s", err, out)
	}
	out, err = demo("--node", "real", "--lb", "traefik").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--node real runs behind --lb haproxy only") {
		t.Errorf("--node real --lb traefik: %v\n%s", err, out)
	}
	out, err = demo("--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--lb string") {
		t.Errorf("--help: %v\n%s", err, out)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
