package podhost

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/stickydrain/stickydrain/test/cluster"
)

// network is one host's bridge and its /24 of 198.18.0.0/15.
type network struct {
	id      string // 4 hex digits, in every name this host makes
	bridge  string
	prefix  netip.Prefix
	gateway netip.Addr
	lock    *os.File

	mu   sync.Mutex // free is shared by every pod's goroutine
	free []netip.Addr
}

const lockDir = "/run/stickydrain-podhost"

// newNetwork reserves a /24 of 198.18.0.0/15 that no other running podhost
// holds (an flock on /run/stickydrain-podhost/<subnet>.lock) and creates a
// bridge for it with the gateway at .1.
func newNetwork() (*network, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", lockDir, err)
	}
	base := netip.MustParseAddr("198.18.0.0").As4()
	for _, i := range rand.Perm(512) {
		a := base
		a[1] += byte(i / 256)
		a[2] = byte(i % 256)
		prefix := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		if Reserved(prefix) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(lockDir, fmt.Sprintf("%d.%d.%d.0.lock", a[0], a[1], a[2])), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening subnet lock: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		n := &network{id: fmt.Sprintf("%04x", rand.IntN(0x10000)), prefix: prefix, lock: f}
		n.bridge = "sdbr" + n.id
		gw := prefix.Addr().As4()
		gw[3] = 1
		n.gateway = netip.AddrFrom4(gw)
		for h := 254; h >= 2; h-- {
			x := prefix.Addr().As4()
			x[3] = byte(h)
			n.free = append(n.free, netip.AddrFrom4(x))
		}
		if err := n.createBridge(); err != nil {
			n.close()
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("no free /24 in 198.18.0.0/15")
}

// reserved are the /24s of 198.18.0.0/15 no pod host hands out: one for
// tests that fake pod IPs by hand, and the real node's pods and Services
// (test/node, test/cluster), which may run on the machine at the same time.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("198.18.0.0/24"),
	netip.MustParsePrefix(cluster.RealNodePodCIDR),
	netip.MustParsePrefix(cluster.ServiceCIDR),
}

// Reserved reports whether p overlaps a range no pod host hands out.
func Reserved(p netip.Prefix) bool {
	for _, r := range reserved {
		if r.Overlaps(p) {
			return true
		}
	}
	return false
}

func (n *network) createBridge() error {
	return runAll(
		[]string{"ip", "link", "add", n.bridge, "type", "bridge"},
		[]string{"ip", "addr", "add", netip.PrefixFrom(n.gateway, 24).String(), "dev", n.bridge},
		[]string{"ip", "link", "set", n.bridge, "up"},
	)
}

func (n *network) alloc() (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.free) == 0 {
		return netip.Addr{}, fmt.Errorf("no free pod IP in %s", n.prefix)
	}
	a := n.free[len(n.free)-1]
	n.free = n.free[:len(n.free)-1]
	return a, nil
}

func (n *network) release(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.free = append([]netip.Addr{a}, n.free...)
}

// sandbox creates a network namespace with lo up and eth0 at ip, its peer
// on the bridge, and a default route through the gateway.
func (n *network) sandbox(name string, ip netip.Addr) error {
	hostIf := "sdv" + n.id + strings.TrimPrefix(name, "sd"+n.id)
	if len(hostIf) > 15 {
		hostIf = hostIf[:15]
	}
	return runAll(
		[]string{"ip", "netns", "add", name},
		[]string{"ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", name},
		[]string{"ip", "link", "set", hostIf, "master", n.bridge, "up"},
		[]string{"ip", "-n", name, "addr", "add", netip.PrefixFrom(ip, 24).String(), "dev", "eth0"},
		[]string{"ip", "-n", name, "link", "set", "eth0", "up"},
		[]string{"ip", "-n", name, "link", "set", "lo", "up"},
		[]string{"ip", "-n", name, "route", "add", "default", "via", n.gateway.String()},
	)
}

// removeSandbox deletes the namespace; its veth pair goes with it.
func removeSandbox(name string) error {
	return run("ip", "netns", "delete", name)
}

func (n *network) close() error {
	var err error
	if n.bridge != "" {
		if e := run("ip", "link", "delete", n.bridge); e != nil && !strings.Contains(e.Error(), "Cannot find device") {
			err = e
		}
	}
	if n.lock != nil {
		n.lock.Close()
	}
	return err
}

func run(argv ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := run(c...); err != nil {
			return err
		}
	}
	return nil
}
