package nginxplus

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseUpstreamFlag reads `NAME[=SERVER[ PARAM…]]`, parameters as on an
// nginx `server` line: weight=N max_conns=N max_fails=N fail_timeout=T
// slow_start=T route=R backup down drain. It returns the upstream name and
// the server, if one is given.
func ParseUpstreamFlag(v string, stream bool) (string, *Server, error) {
	name, rest, hasServer := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " /") {
		return "", nil, fmt.Errorf("%q: want NAME[=SERVER[ PARAM...]], e.g. 'legacy=127.0.0.1:9001 weight=2 drain'", v)
	}
	if !hasServer {
		return name, nil, nil
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, fmt.Errorf("%q: no server after =", v)
	}
	s := &Server{Server: fields[0]}
	for _, p := range fields[1:] {
		k, val, _ := strings.Cut(p, "=")
		num := func() (int, error) {
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%q: %s wants a whole number", v, k)
			}
			return n, nil
		}
		var err error
		switch k {
		case "weight":
			s.Weight, err = num()
		case "max_conns":
			s.MaxConns, err = num()
		case "max_fails":
			s.MaxFails, err = num()
		case "fail_timeout":
			s.FailTimeout = val
		case "slow_start":
			s.SlowStart = val
		case "route":
			s.Route = val
		case "backup":
			s.Backup = true
		case "down":
			s.Down = true
		case "drain":
			if stream {
				return "", nil, fmt.Errorf("%q: drain is not a parameter of stream servers", v)
			}
			s.Drain = true
		default:
			return "", nil, fmt.Errorf("%q: unknown server parameter %q; want weight=, max_conns=, max_fails=, fail_timeout=, slow_start=, route=, backup, down, drain", v, k)
		}
		if err != nil {
			return "", nil, err
		}
	}
	return name, s, nil
}
