package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
)

func TestWatchAppliesValidChangesAndRefusesInvalidOnes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	valid := "loadBalancers: [{name: a, type: haproxy, instances: {static: [\"tcp://h:1\"]}}]\nresync: %s\n"
	write := func(s string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(strings.Replace(valid, "%s", "30s", 1))
	applied := make(chan *config.Config, 4)
	refused := make(chan error, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded, _ := os.ReadFile(path)
	go config.Watch(ctx, path, loaded, 10*time.Millisecond, drivers.New(), func(c *config.Config, _ []byte) bool { applied <- c; return true }, func(err error) { refused <- err }, nil)

	write("loadBalancers: [{name: a, type: f5}]\n")
	select {
	case err := <-refused:
		if !strings.Contains(err.Error(), `loadBalancers[0].type: Unsupported value: "f5"`) {
			t.Errorf("refusal %v does not name the field", err)
		}
	case <-applied:
		t.Fatal("an invalid configuration was applied")
	case <-time.After(5 * time.Second):
		t.Fatal("no refusal")
	}
	write(strings.Replace(valid, "%s", "1m", 1))
	select {
	case c := <-applied:
		if c.Resync.Duration != time.Minute {
			t.Errorf("applied resync %v", c.Resync.Duration)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a valid change was not applied")
	}
}

// A change apply holds (it would take live servers) is given
// again at each interval until it is applied; a deleted file changes nothing.
func TestWatchRetriesAHeldChangeAndIgnoresADeletedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("resync: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan int, 100)
	n := 0
	go config.Watch(ctx, path, nil, 10*time.Millisecond, drivers.New(), func(*config.Config, []byte) bool {
		n++
		calls <- n
		return n >= 3 // held twice, then applied
	}, func(err error) { t.Errorf("refused: %v", err) }, nil)
	deadline := time.After(5 * time.Second)
	for got := 0; got < 3; {
		select {
		case got = <-calls:
		case <-deadline:
			t.Fatalf("apply called %d times, want 3 (retried until applied)", got)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-calls:
		t.Fatalf("apply called again (%d) after settling, or for a deleted file", n)
	case <-time.After(200 * time.Millisecond):
	}
}

// A file back to the running configuration after a held change or an
// invalid one says so (nothing is pending any more), once; the held
// change is not tried again.
func TestWatchSaysWhenTheFileIsBackToTheRunningConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	running := []byte("resync: 1m\n")
	write := func(b []byte) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(running)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held, refused, back := make(chan struct{}, 100), make(chan struct{}, 100), make(chan struct{}, 100)
	go config.Watch(ctx, path, running, 10*time.Millisecond, drivers.New(),
		func(*config.Config, []byte) bool { held <- struct{}{}; return false },
		func(error) { refused <- struct{}{} },
		func() { back <- struct{}{} })
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	write([]byte("resync: 2m\n"))
	wait(held, "held change")
	write(running)
	wait(back, "back to the running configuration after a held change")
	write([]byte("loadBalancers: [{name: a, type: f5}]\n"))
	wait(refused, "refusal")
	write(running)
	wait(back, "back to the running configuration after an invalid change")
	time.Sleep(100 * time.Millisecond)
	if len(back) != 0 || len(held) > 0 || len(refused) != 0 {
		t.Errorf("after the file came back: %d more backs, %d more held tries, %d more refusals; want none", len(back), len(held), len(refused))
	}
}
