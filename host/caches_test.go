package host

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolchainCacheGo(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // Linux; elsewhere the user's own
	base, err := os.UserCacheDir()
	require.NoError(t, err)
	a, b := t.TempDir(), t.TempDir()
	ca, err := ToolchainCache("go", a)
	require.NoError(t, err)
	assert.Equal(t, "go", ca.Name)
	for _, kv := range []string{"GOPROXY=off", "GOTOOLCHAIN=local"} {
		assert.Contains(t, ca.Env, kv)
	}
	require.Len(t, ca.Writable, 1)
	build := ca.Writable[0]
	assert.Contains(t, ca.Env, "GOCACHE="+build)
	assert.Equal(t, filepath.Join(base, "runbox", "go-build"), filepath.Dir(build))
	fi, err := os.Stat(build)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the build cache is the owner's only")
	for _, p := range ca.ReadOnly {
		assert.True(t, filepath.IsAbs(p), p)
		assert.False(t, slices.Contains(ca.Writable, p), "%s is never writable", p)
	}
	modcache := ""
	for _, kv := range ca.Env {
		if v, ok := strings.CutPrefix(kv, "GOMODCACHE="); ok {
			modcache = v
		}
	}
	assert.Contains(t, ca.ReadOnly, modcache, "the module cache is shared read-only")

	again, err := ToolchainCache("go", a)
	require.NoError(t, err)
	assert.Equal(t, ca.Writable, again.Writable, "one directory keeps its cache")
	cb, err := ToolchainCache("go", b)
	require.NoError(t, err)
	assert.NotEqual(t, ca.Writable, cb.Writable, "another directory gets its own")

	_, err = ToolchainCache("cargo", a)
	assert.ErrorIs(t, err, ErrUnknownCache)
}
