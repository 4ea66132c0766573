package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

// badTimeouts overflow a time.Duration, round to nothing, or are not
// numbers: each once meant "no timeout".
var badTimeouts = []string{"1e300", "inf", "+Inf", "Infinity", "1e10", "9.3e9", "NaN", "-1", "-5s", "0", "0s", "1e-12", "9999999999h", "soon"}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30s": 30 * time.Second, "5m": 5 * time.Minute, "1.5": 1500 * time.Millisecond, "2": 2 * time.Second,
		"1e9": 1e9 * time.Second, "2562047h": 2562047 * time.Hour, "": 0,
	} {
		got, err := (&execFlags{timeout: in}).parseTimeout()
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range badTimeouts {
		got, err := (&execFlags{timeout: in}).parseTimeout()
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "%s gave %v", in, got)
	}
}

// TestBadTimeoutExits125: every command with --timeout refuses a bad one
// with exit status 125 and one line, before reaching anything.
func TestBadTimeoutExits125(t *testing.T) {
	for _, in := range badTimeouts {
		for _, args := range [][]string{
			{"exec", "--timeout", in, "no-such-session", "--", "true"},
			{"run", "--timeout", in, "no-such-image:1", "--", "true"},
			{"host", "--timeout", in, "--", "true"},
		} {
			code, msg := executeCapturingStderr(t, args)
			assert.Equal(t, exitFailure, code, "%v", args)
			assert.Equal(t, 1, strings.Count(msg, "\n"), "%v: one line: %q", args, msg)
			assert.Contains(t, msg, "--timeout", "%v", args)
		}
	}
}

func executeCapturingStderr(t *testing.T, args []string) (int, string) {
	t.Helper()
	stderr := os.Stderr
	r, w, err := os.Pipe()
	require.NoError(t, err)
	os.Stderr = w
	code := execute(args)
	w.Close()
	os.Stderr = stderr
	msg, _ := io.ReadAll(r)
	r.Close()
	return code, string(msg)
}

func TestFailureIsOneLine(t *testing.T) {
	var b strings.Builder
	printFailure(&b, errors.Join(errors.New("first\n"), fmt.Errorf("%w: second", runbox.ErrSessionNotFound)))
	assert.Equal(t, "runbox: first; runbox: session not found: second (see `runbox ls` for the sessions there are)\n", b.String())
}

func TestHardenFlags(t *testing.T) {
	var of openFlags
	fs := pflag.NewFlagSet("open", pflag.ContinueOnError)
	of.register(fs)
	require.NoError(t, fs.Parse([]string{"--runtime", "runsc", "--cap-drop", "ALL", "--cap-add", "CHOWN",
		"--security-opt", "no-new-privileges", "--read-only", "--tmpfs", "/tmp:size=64m,mode=1777", "--tmpfs", "/run"}))
	spec, err := of.spec("img", nil)
	require.NoError(t, err)
	assert.Equal(t, "runsc", spec.Runtime)
	assert.Equal(t, runbox.Security{CapDrop: []string{"ALL"}, CapAdd: []string{"CHOWN"}, NoNewPrivileges: true, ReadOnlyRootfs: true,
		Tmpfs: []runbox.Tmpfs{{Target: "/tmp", Options: "size=64m,mode=1777"}, {Target: "/run"}}}, spec.Security)

	for _, bad := range [][]string{{"--security-opt", "seccomp=unconfined"}, {"--tmpfs", "relative"}, {"--cap-drop", "NET RAW"}} {
		var of openFlags
		fs := pflag.NewFlagSet("open", pflag.ContinueOnError)
		of.register(fs)
		require.NoError(t, fs.Parse(bad))
		_, err := of.spec("img", nil)
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, bad)
	}
}
