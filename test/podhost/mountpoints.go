package podhost

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Mount points are shared by every pod host on the machine. A pod's volume
// is bind-mounted at its absolute mountPath (/stickydrain/bin, say) inside
// the container's mount namespace, and a bind mount needs its target on the
// one root filesystem every host shares. Removing that directory on the host
// detaches the mounts on it in every other mount namespace (Linux ≥ 3.18):
// a host that stopped and removed "its" /stickydrain took the volumes out
// from under another host's running containers — a drainctl losing its
// binary and its pod's annotations in the middle of a drain. So the mount
// points a host makes are recorded machine-wide, every running host holds a
// shared lock for its life, and only the last one to stop (the one that can
// take the lock exclusively) removes them. A host whose process died holds
// nothing (flock dies with the file description), and its watchdog cleans
// up on the same terms.

const (
	mountsLock = lockDir + "/mounts.lock"
	mountsMade = lockDir + "/mounts.made"
)

// mountUser is one host's shared hold on the machine's mount points.
type mountUser struct{ f *os.File }

// useMountPoints takes a shared hold, waiting while a stopping host removes
// the mount points.
func useMountPoints() (*mountUser, error) {
	f, err := os.OpenFile(mountsLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", mountsLock, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", mountsLock, err)
	}
	return &mountUser{f: f}, nil
}

// record notes a directory or file a host made for a mount point.
func (m *mountUser) record(path string) error {
	f, err := os.OpenFile(mountsMade, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("recording mount point %s: %w", path, err)
	}
	_, err = fmt.Fprintln(f, path)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording mount point %s: %w", path, err)
	}
	return nil
}

// release drops the hold and, if no other host holds one, removes every
// mount point any host made. It reports whether it was the last.
func (m *mountUser) release() (bool, error) {
	if m == nil || m.f == nil {
		return false, nil
	}
	defer func() { m.f.Close(); m.f = nil }()
	// Converting a shared lock to an exclusive one is not atomic: drop it
	// and try; a host starting meanwhile makes the try fail, and then it
	// is that host's to clean up.
	if err := syscall.Flock(int(m.f.Fd()), syscall.LOCK_UN); err != nil {
		return false, fmt.Errorf("unlocking %s: %w", mountsLock, err)
	}
	if syscall.Flock(int(m.f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return false, nil
	}
	return true, removeMadeMountPoints()
}

// removeMadeMountPoints removes what mounts.made lists; the caller holds the
// lock exclusively.
func removeMadeMountPoints() error {
	f, err := os.Open(mountsMade)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", mountsMade, err)
	}
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p := sc.Text(); filepath.IsAbs(p) && p != "/" {
			paths = append(paths, p)
		}
	}
	f.Close()
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing mount points: %w", err)
	}
	return os.Remove(mountsMade)
}

// cleanupMountsScript is the shell form of release for a host whose process
// died: it holds no lock any more, so the exclusive try alone decides.
const cleanupMountsScript = `exec 9>>` + mountsLock + `
if flock -n -x 9; then [ -f ` + mountsMade + ` ] && for d in $(cat ` + mountsMade + `); do rm -rf "$d"; done; rm -f ` + mountsMade + `; fi
exec 9>&-`
