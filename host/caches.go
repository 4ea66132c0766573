package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrUnknownCache reports a cache preset [ToolchainCache] does not know.
var ErrUnknownCache = errors.New("host: unknown toolchain cache")

// Cache is what a confined build needs of one toolchain's caches, least
// privilege first: the caches it may only read (the caller's own, shared
// with the caller's unconfined builds), the one directory it may write
// (its own, never the caller's, so that a confined build cannot plant
// results an unconfined build would trust later), and the environment that
// points the toolchain at both and away from the network.
//
// Add Writable to [Policy.WritableRoots], ReadOnly to
// [Policy.ReadableRoots] when those are set (everything is readable
// without them), and Env to the command's environment.
type Cache struct {
	// Name is the preset's name.
	Name string
	// ReadOnly are the caller's caches and toolchain, read but never
	// written by the command.
	ReadOnly []string
	// Writable is the command's own cache directory, created owner-only
	// and kept between runs.
	Writable []string
	// Env holds the KEY=VALUE entries that select the caches.
	Env []string
}

// CachePresets names the presets [ToolchainCache] knows.
var CachePresets = []string{"go"}

// ToolchainCache returns the preset name for builds in dir (a working
// directory; each directory gets its own writable cache):
//
//   - "go": the caller's module cache and GOROOT read-only (as `go env`
//     reports them), a build cache of dir's own writable, GOPROXY=off
//     (modules come from the module cache only; a missing one is an error,
//     not a download) and GOTOOLCHAIN=local.
//
// The writable caches live under the user's cache directory, in
// runbox/NAME/ and a name derived from dir.
func ToolchainCache(name, dir string) (Cache, error) {
	switch name {
	case "go":
		return goCache(dir)
	}
	return Cache{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownCache, name, strings.Join(CachePresets, ", "))
}

// goCache is the "go" preset. `go env` runs unconfined: it is the
// caller's own toolchain, run for the caller, reading only. The settings
// that change what a build produces (GOFLAGS, GOEXPERIMENT, CGO_ENABLED)
// follow the caller's, so that the confined build is the caller's build.
func goCache(dir string) (Cache, error) {
	out, err := exec.Command("go", "env", "-json", "GOMODCACHE", "GOROOT", "GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED").Output()
	if err != nil {
		return Cache{}, fmt.Errorf("host: go cache: go env: %w", err)
	}
	var env map[string]string
	if err := json.Unmarshal(out, &env); err != nil {
		return Cache{}, fmt.Errorf("host: go cache: go env: %w", err)
	}
	modcache, goroot := env["GOMODCACHE"], env["GOROOT"]
	if !filepath.IsAbs(modcache) || !filepath.IsAbs(goroot) {
		return Cache{}, fmt.Errorf("host: go cache: go env printed %q", bytes.TrimSpace(out))
	}
	build, err := ownCache("go-build", dir)
	if err != nil {
		return Cache{}, err
	}
	c := Cache{
		Name:     "go",
		ReadOnly: []string{modcache, goroot},
		Writable: []string{build},
		Env: []string{
			"GOMODCACHE=" + modcache, "GOCACHE=" + build,
			"GOPROXY=off", "GOTOOLCHAIN=local",
		},
	}
	for _, k := range []string{"GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED"} {
		if v := env[k]; v != "" {
			c.Env = append(c.Env, k+"="+v)
		}
	}
	return c, nil
}

// ownCache creates (owner-only) and returns the writable cache kind for
// builds in dir.
func ownCache(kind, dir string) (string, error) {
	canon, err := canonicalPath(dir)
	if err != nil {
		return "", fmt.Errorf("host: %s cache: %w", kind, err)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("host: %s cache: %w", kind, err)
	}
	sum := sha256.Sum256([]byte(canon))
	p := filepath.Join(base, "runbox", kind, filepath.Base(canon)+"-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(p, 0o700); err != nil {
		return "", fmt.Errorf("host: %s cache: %w", kind, err)
	}
	return p, nil
}
