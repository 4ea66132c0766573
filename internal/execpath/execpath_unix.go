//go:build unix

// Package execpath resolves a program name the way execvp does, but in a
// child's PATH rather than the caller's, and with one rule shared by every
// place runbox starts a program (the host backend and the in-session
// agent): relative PATH entries are skipped, since what they name would
// depend on the working directory (the hazard exec.ErrDot guards against).
package execpath

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// DefaultPath is searched when a child's environment has no PATH.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Look resolves file in pathEnv (DefaultPath when empty). A name with a
// slash is taken as is, relative to dir when it is relative (the caller's
// working directory when dir is empty).
func Look(file, dir, pathEnv string) (string, error) {
	if strings.Contains(file, "/") {
		p := file
		if !filepath.IsAbs(p) {
			base := dir
			if base == "" {
				wd, err := os.Getwd()
				if err != nil {
					return "", err
				}
				base = wd
			}
			p = filepath.Join(base, p)
		}
		if err := Executable(p); err != nil {
			return "", &exec.Error{Name: file, Err: err}
		}
		return p, nil
	}
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(d) {
			continue
		}
		if p := filepath.Join(d, file); Executable(p) == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// Executable reports whether p is a file with an execute bit; the kernel
// makes the final decision at exec.
func Executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	if fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// PathOf returns the PATH entry of env, or "" when it has none.
func PathOf(env []string) string {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return path
}
