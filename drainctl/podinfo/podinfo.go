// Package podinfo reads the annotations file the kubelet writes for a
// downward-API volume (fieldRef metadata.annotations): one `key="value"`
// line per annotation, the value quoted as Go quotes strings. The kubelet
// replaces the file atomically (a symlink swap) when annotations change.
package podinfo

import (
	"bufio"
	"bytes"
	"fmt"
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

// Read reads and parses the annotations file at path.
func Read(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading pod annotations: %w", err)
	}
	a, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("parsing pod annotations %s: %w", path, err)
	}
	return a, nil
}
