package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A blob pushed with the distribution API's monolithic upload comes back
// by its digest, and a digest never pushed is not found.
func TestABlobComesBackByItsDigest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	blob := []byte("stickydrain")
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	resp, err := http.Post("http://"+r.Host+"/v2/tests/blob/blobs/uploads/", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("starting an upload: %s, Location %q", resp.Status, loc)
	}
	if !strings.HasPrefix(loc, "http") {
		loc = "http://" + r.Host + loc
	}
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	req, _ := http.NewRequest(http.MethodPut, loc+sep+"digest="+digest, bytes.NewReader(blob))
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("uploading the blob: %s", resp.Status)
	}
	get := func(d string) (int, []byte) {
		resp, err := http.Get("http://" + r.Host + "/v2/tests/blob/blobs/" + d)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := get(digest); code != http.StatusOK || !bytes.Equal(b, blob) {
		t.Errorf("GET by digest: %d %q, want 200 %q", code, b, blob)
	}
	if code, _ := get(fmt.Sprintf("sha256:%x", sha256.Sum256([]byte("other")))); code != http.StatusNotFound {
		t.Errorf("GET of a digest never pushed: %d, want 404", code)
	}
}
