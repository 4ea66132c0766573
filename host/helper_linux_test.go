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

// buildHelper builds cmd/runbox-sandbox, static, for the test.
func buildHelper(tb testing.TB) string {
	tb.Helper()
	helper := filepath.Join(tb.TempDir(), "runbox-sandbox")
	build := exec.Command("go", "build", "-o", helper, "../cmd/runbox-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatal(err, string(out))
	}
	return helper
}

func TestDedicatedHelper(t *testing.T) {
	helper := buildHelper(t)

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
