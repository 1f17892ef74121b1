package e2e

import (
	"os"
	"testing"

	"github.com/stickydrain/stickydrain/test/testbin"
)

// bins builds the binaries every scenario of this test process runs, each
// once: linking the webhook or the controller takes 5–16 s here, and a
// process runs a dozen environments.
var bins *testbin.Builder

func TestMain(m *testing.M) {
	bins = testbin.New()
	code := m.Run()
	_ = bins.Close()
	os.Exit(code)
}
