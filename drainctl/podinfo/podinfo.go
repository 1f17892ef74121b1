// Package podinfo reads the annotations file the kubelet writes for a
// downward-API volume (fieldRef metadata.annotations): one `key="value"`
// line per annotation, the value quoted as Go quotes strings. The kubelet
// replaces the file atomically (a symlink swap) when annotations change.
package podinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Parse reads annotations from the file's content. Lines that are not
// `key="value"` are errors, naming the line.
func Parse(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), len(b)+1)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, quoted, ok := strings.Cut(line, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("line %d: want key=\"value\"", n)
		}
		val, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): value is not a quoted string", n, key)
		}
		out[key] = val
	}
	return out, sc.Err()
}

// maxFile bounds the annotations file, read every second. The API server
// stores at most 256 KiB of annotations, keys included, and the kubelet's
// key="%q" lines make that at most five times as many bytes: a larger
// file is not the kubelet's (a device, a log named by mistake) and is not
// read whole.
const maxFile = 4 << 20

// Read reads and parses the annotations file at path.
func Read(path string) (map[string]string, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("reading pod annotations: %w", err)
	}
	a, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("parsing pod annotations %s: %w", path, err)
	}
	return a, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFile)
	}
	return b, nil
}
