// Package must is the one test helper every suite shares: a leaf package
// (the standard library only), so that a unit test importing it links
// nothing more than it did.
package must

import "testing"

// OK fails the test at once when err is not nil.
func OK(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
