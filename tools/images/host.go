package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// hostLayer is the layer of an image's files from the build machine
// (spec.Host): its trees with symbolic links followed, the shared
// libraries its ELF files load, its writable directories, and every parent
// directory, in path order so that the same files give the same digest.
// Only the build machine's own platform can carry its files.
func hostLayer(o BuildOptions, spec Image, p v1.Platform) (v1.Layer, error) {
	if p.OS != runtime.GOOS || p.Architecture != runtime.GOARCH {
		return nil, fmt.Errorf("it holds the build machine's files: build it for %s/%s only, not %s", runtime.GOOS, runtime.GOARCH, p)
	}
	files := map[string]entry{}
	for _, t := range spec.Host.Trees {
		from := t.From
		if !filepath.IsAbs(from) {
			from = filepath.Join(o.Root, from)
		}
		to := t.To
		if to == "" {
			to = t.From
		}
		skip := map[string]bool{}
		for _, s := range t.Skip {
			skip[s] = true
		}
		if err := addTree(files, from, to, "", skip, 0); err != nil {
			return nil, err
		}
	}
	for _, pattern := range spec.Host.LibrariesOf {
		elfs, err := filepath.Glob(pattern)
		if err != nil || len(elfs) == 0 {
			return nil, fmt.Errorf("libraries of %s: no such file on this machine (%v)", pattern, err)
		}
		for _, elf := range elfs {
			if _, ok := files[elf]; !ok {
				continue // left out of the image (Skip)
			}
			libs, missing, err := sharedLibraries(elf)
			if err != nil {
				return nil, err
			}
			// A library the loader finds only at run time (libjvm.so,
			// through the JDK's own search) must be in the image already.
			for _, m := range missing {
				if !holdsFileNamed(files, m) {
					return nil, fmt.Errorf("ldd %s: %s not found, on this machine nor in the image", elf, m)
				}
			}
			for _, lib := range libs {
				if _, ok := files[lib]; ok {
					continue
				}
				data, err := os.ReadFile(lib)
				if err != nil {
					return nil, fmt.Errorf("library %s of %s: %w", lib, elf, err)
				}
				files[lib] = entry{path: lib, mode: 0o755, data: data}
			}
		}
	}
	for _, d := range spec.Host.WritableDirs {
		files[d] = entry{path: d, mode: 0o755, uid: NonRoot, dir: true}
	}
	for p := range files {
		for dir := path.Dir(p); dir != "/" && dir != "."; dir = path.Dir(dir) {
			if _, ok := files[dir]; !ok {
				files[dir] = entry{path: dir, mode: 0o755, dir: true}
			}
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := make([]entry, 0, len(paths))
	for _, p := range paths {
		entries = append(entries, files[p])
	}
	return layer(o.Epoch, entries)
}

// addTree adds from (a file or a directory, links followed) at to; rel is
// the path under the tree's root, for skip.
func addTree(files map[string]entry, from, to, rel string, skip map[string]bool, depth int) error {
	if skip[rel] {
		return nil
	}
	if depth > 40 {
		return fmt.Errorf("%s: directories nested too deep (a link loop?)", from)
	}
	fi, err := os.Stat(from)
	if err != nil {
		return fmt.Errorf("image file %s: %w", from, err)
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(from)
		if err != nil {
			return fmt.Errorf("image file %s: %w", from, err)
		}
		files[to] = entry{path: to, mode: int64(fi.Mode().Perm()), data: data}
		return nil
	}
	files[to] = entry{path: to, mode: 0o755, dir: true}
	des, err := os.ReadDir(from)
	if err != nil {
		return fmt.Errorf("image directory %s: %w", from, err)
	}
	for _, de := range des {
		if err := addTree(files, filepath.Join(from, de.Name()), path.Join(to, de.Name()), path.Join(rel, de.Name()), skip, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// holdsFileNamed reports whether files has a file of that base name.
func holdsFileNamed(files map[string]entry, name string) bool {
	for p, e := range files {
		if !e.dir && path.Base(p) == name {
			return true
		}
	}
	return false
}

// sharedLibraries are the files ldd says elf loads, by the paths the
// loader looks for (its libraries and the dynamic loader), and the names
// of those ldd did not find.
func sharedLibraries(elf string) (libs, missing []string, err error) {
	out, err := exec.Command("ldd", elf).CombinedOutput()
	if err != nil {
		return nil, nil, fmt.Errorf("ldd %s: %w: %s", elf, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		fields := strings.Fields(line)
		if strings.Contains(line, "not found") && len(fields) > 0 {
			missing = append(missing, fields[0])
			continue
		}
		switch {
		case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
			libs = append(libs, path.Clean(fields[2]))
		case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
			libs = append(libs, path.Clean(fields[0])) // the dynamic loader
		}
	}
	return libs, missing, nil
}
