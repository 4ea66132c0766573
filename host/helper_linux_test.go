package host

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestDedicatedHelper(t *testing.T) {
	helper := filepath.Join(t.TempDir(), "runbox-sandbox")
	build := exec.Command("go", "build", "-o", helper, "../cmd/runbox-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	e := newExecutor(t, WithPolicy(Policy{}), WithHelper(helper))
	g := e.Guarantees()
	assert.Equal(t, runbox.GuaranteeLevelFull, g.Level)
	assert.True(t, g.WriteBoundary)
	var buf bytes.Buffer
	res, err := e.Run(context.Background(), runbox.ShellCommand("echo sandboxed; test -w / || echo read-only"), runbox.Streams{Stdout: &buf})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "sandboxed\nread-only\n", buf.String())

	// Run by hand, the helper explains itself and does nothing.
	c := exec.Command(helper)
	msg, err := c.CombinedOutput()
	assert.Error(t, err)
	assert.Contains(t, string(msg), "host.WithHelper")

	_, err = New(WithHelper(""))
	assert.Error(t, err)
}
