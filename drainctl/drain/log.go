package drain

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Logger writes drainctl's progress lines, as text or JSON lines.
type Logger struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	now  func() time.Time
}

// NewLogger returns a Logger writing to w; asJSON selects JSON lines.
func NewLogger(w io.Writer, asJSON bool) *Logger {
	return &Logger{w: w, json: asJSON, now: time.Now}
}

// Log writes one line: msg for people, kv (key, value pairs) as JSON fields
// in JSON mode.
func (l *Logger) Log(msg string, kv ...any) {
	if l == nil || l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := l.now().UTC().Format(time.RFC3339)
	if !l.json {
		fmt.Fprintf(l.w, "%s drainctl: %s\n", ts, msg)
		return
	}
	rec := map[string]any{"time": ts, "logger": "drainctl", "msg": msg}
	for i := 0; i+1 < len(kv); i += 2 {
		if k, ok := kv[i].(string); ok {
			v := kv[i+1]
			if d, ok := v.(time.Duration); ok {
				v = d.Seconds()
				k += "_seconds"
			}
			rec[k] = v
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintf(l.w, "%s drainctl: %s\n", ts, msg)
		return
	}
	l.w.Write(append(b, '\n'))
}
