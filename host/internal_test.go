package host

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestWindowsShellResolution(t *testing.T) {
	const cmd = `echo a & echo "b c" | findstr b`
	for _, sys := range []string{`C:\Windows\System32`, `C:\Windows\System32\`, `c:/Windows/System32/`} {
		path, args, line, err := windowsShell(sys, cmd)
		require.NoError(t, err, sys)
		dir := strings.TrimRight(sys, `\/`)
		assert.Equal(t, dir+`\cmd.exe`, path, "%q: path", sys)
		assert.Equal(t, `"`+dir+`\cmd.exe" /d /s /c "`+cmd+`"`, line, "%q: command line", sys)
		assert.Equal(t, []string{path, "/d", "/s", "/c", cmd}, args, "%q: args", sys)
	}
	path, _, _, err := windowsShell(`\\server\share\System32`, "ver")
	assert.NoError(t, err, "UNC system directory")
	assert.Equal(t, `\\server\share\System32\cmd.exe`, path, "UNC system directory")
	// Never anything that a PATH or working-directory lookup could supply.
	for _, bad := range []string{"", `System32`, `.\System32`, `C:`, `C:System32`, "/usr/bin", `\\`, `C:\Win"dows`} {
		path, _, _, err := windowsShell(bad, "ver")
		assert.ErrorIs(t, err, runbox.ErrStart, "system directory %q accepted as %q", bad, path)
	}
}

func TestDedupEnvLastWins(t *testing.T) {
	assert.Equal(t, []string{"A=3", "B=4", "C="}, dedupEnv([]string{"A=1", "B=2", "A=3", "C=", "B=4"}))
	assert.Equal(t, "/b", envValue([]string{"PATH=/a", "X=1", "PATH=/b"}, "PATH"))
}

func TestCaptureKeepsAtMostLimit(t *testing.T) {
	calls := 0
	c := newCapture(1000, func() { calls++ })
	chunk := []byte(strings.Repeat("x", 300))
	for range 100 {
		n, err := c.Write(chunk)
		require.NoError(t, err)
		require.Equal(t, len(chunk), n, "a write past the limit is reported whole")
	}
	assert.Len(t, c.bytes(), 1000)
	assert.LessOrEqual(t, cap(c.buf), 1000)
	assert.True(t, c.exceeded())
	assert.Equal(t, 1, calls, "overflow is signalled once")
	u := newCapture(0, func() { assert.Fail(t, "overflow without a limit") })
	u.Write(chunk)
	assert.Len(t, u.bytes(), 300, "unlimited capture keeps everything")
	assert.False(t, u.exceeded(), "unlimited capture is never exceeded")
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Option{WithTerminateGrace(0), WithTerminateGrace(-1), WithWaitDelay(0)} {
		_, err := New(o)
		assert.Error(t, err, "a non-positive duration")
	}
}

func TestUserIsRefused(t *testing.T) {
	e, err := New()
	require.NoError(t, err)
	cmd := runbox.Command{Args: []string{"true"}, User: "nobody"}
	_, err = e.Run(context.Background(), cmd, runbox.Streams{})
	assert.ErrorIs(t, err, runbox.ErrUnsupported)
	_, err = e.Start(context.Background(), cmd)
	assert.ErrorIs(t, err, runbox.ErrUnsupported)
}

// An access description is a copy: neither the paths it was made from nor
// the slice it hands out can change it.
func TestProcessAccessIsImmutable(t *testing.T) {
	paths := []string{"/b", "/a", "/a"}
	a := newProcessAccess(ProcessAccessScopedWrite, paths...)
	paths[0] = "/changed"
	got := a.WritePaths()
	assert.Equal(t, []string{"/a", "/b"}, got)
	got[0] = "/changed"
	assert.Equal(t, []string{"/a", "/b"}, a.WritePaths())
	assert.Empty(t, newProcessAccess(ProcessAccessBroadWrite, "/x").WritePaths())
}

// Terminal fields without a terminal are refused by Run, as by
// PrepareProcess, rather than dropped.
func TestRunRefusesTerminalFieldsWithoutTTY(t *testing.T) {
	e := newExecutor(t)
	for name, c := range map[string]runbox.Command{
		"size":   {Args: []string{"true"}, TermSize: runbox.TermSize{Rows: 10, Cols: 10}},
		"resize": {Args: []string{"true"}, Resize: make(chan runbox.TermSize)},
	} {
		res, err := e.Run(testCtx(t), c, runbox.Streams{})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, name)
		assert.Equal(t, -1, res.ExitCode, name)
	}
}
