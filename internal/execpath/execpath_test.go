//go:build unix

package execpath

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLook(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	require.NoError(t, os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), nil, 0o644))

	p, err := Look("prog", "", "/nonexistent:"+dir)
	require.NoError(t, err)
	assert.Equal(t, prog, p)

	p, err = Look("./prog", dir, "")
	require.NoError(t, err)
	assert.Equal(t, prog, p, "a name with a slash is relative to dir")

	_, err = Look("prog", dir, "."+string(filepath.ListSeparator)+"")
	assert.True(t, errors.Is(err, exec.ErrNotFound), "relative and empty PATH entries are skipped: %v", err)

	_, err = Look(filepath.Join(dir, "data"), "", "")
	assert.ErrorIs(t, err, os.ErrPermission)
	_, err = Look(dir, "", "")
	assert.Error(t, err, "a directory is not a program")

	assert.Equal(t, "/x", PathOf([]string{"A=1", "PATH=/y", "PATH=/x"}))
	assert.Empty(t, PathOf(nil))
}
