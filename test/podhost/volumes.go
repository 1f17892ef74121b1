package podhost

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// volumes prepares a pod's volumes on the host, as the kubelet does:
// emptyDir as a directory, downwardAPI as files written atomically (a
// timestamped directory behind a ..data symlink) and rewritten when the
// pod's labels or annotations change. Other volume types are refused.
type volumes struct {
	dir   string            // the pod's volume root
	paths map[string]string // volume name → host directory
	dapi  map[string]*corev1.DownwardAPIVolumeSource
}

func newVolumes(dir string, pod *corev1.Pod) (*volumes, error) {
	v := &volumes{dir: dir, paths: map[string]string{}, dapi: map[string]*corev1.DownwardAPIVolumeSource{}}
	for _, vol := range pod.Spec.Volumes {
		p := filepath.Join(dir, vol.Name)
		switch {
		case vol.EmptyDir != nil:
			if err := os.MkdirAll(p, 0o777); err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			if err := os.Chmod(p, 0o777); err != nil { // emptyDir is world-writable, as the kubelet makes it
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
		case vol.DownwardAPI != nil:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			v.dapi[vol.Name] = vol.DownwardAPI
		default:
			return nil, fmt.Errorf("volume %s: podhost supports emptyDir and downwardAPI volumes only", vol.Name)
		}
		v.paths[vol.Name] = p
	}
	return v, v.refresh(pod)
}

// refresh rewrites the downward-API files from pod.
func (v *volumes) refresh(pod *corev1.Pod) error {
	for name, src := range v.dapi {
		files := map[string]string{}
		for _, item := range src.Items {
			if item.FieldRef == nil {
				return fmt.Errorf("volume %s item %s: podhost supports fieldRef items only", name, item.Path)
			}
			val, err := fieldValue(pod, item.FieldRef.FieldPath)
			if err != nil {
				return fmt.Errorf("volume %s item %s: %w", name, item.Path, err)
			}
			files[item.Path] = val
		}
		if err := atomicWrite(v.paths[name], files); err != nil {
			return fmt.Errorf("volume %s: %w", name, err)
		}
	}
	return nil
}

// atomicWrite writes files the way the kubelet's AtomicWriter does: into
// a fresh ..<timestamp> directory, then swaps the ..data symlink to it with
// a rename, so readers see the old set or the new one, never a mix.
func atomicWrite(dir string, files map[string]string) error {
	ts := filepath.Join(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.000000000"))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		return err
	}
	for rel, content := range files {
		p := filepath.Join(ts, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for rel := range files {
		top := strings.Split(rel, "/")[0]
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
				return err
			}
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// fieldValue resolves a downward-API field path on pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	}
	for _, prefix := range []string{"metadata.labels['", "metadata.annotations['"} {
		if key, ok := strings.CutPrefix(path, prefix); ok && strings.HasSuffix(key, "']") {
			key = strings.TrimSuffix(key, "']")
			if strings.HasPrefix(prefix, "metadata.labels") {
				return pod.Labels[key], nil
			}
			return pod.Annotations[key], nil
		}
	}
	return "", fmt.Errorf("field path %q is not supported", path)
}

// formatMap is the kubelet's format for label and annotation files:
// sorted key="value" lines, the value quoted as Go quotes strings.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// containerEnv builds a container's environment: a default PATH and
// HOSTNAME, then its env in order, with $(VAR) references expanded and
// downward-API fieldRefs resolved.
func containerEnv(pod *corev1.Pod, c *corev1.Container) ([]string, map[string]string, error) {
	vars := map[string]string{
		"PATH":     "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME": pod.Name,
	}
	order := []string{"PATH", "HOSTNAME"}
	for _, e := range c.Env {
		val := expand(e.Value, vars)
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				return nil, nil, fmt.Errorf("env %s: podhost supports value and valueFrom.fieldRef only", e.Name)
			}
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			val = v
		}
		if _, seen := vars[e.Name]; !seen {
			order = append(order, e.Name)
		}
		vars[e.Name] = val
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

// expand replaces $(NAME) with a defined variable, as Kubernetes does in
// env values, command and args; $$ escapes; undefined references stay.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
