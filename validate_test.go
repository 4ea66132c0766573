package runbox

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommandValidate(t *testing.T) {
	ok := []Command{
		{Args: []string{"true"}},
		{Args: []string{"env"}, Env: []string{"A=", "B=c=d"}, CleanEnv: true},
		ShellCommand("echo hi"),
		{Args: []string{"sh"}, TTY: true, TermSize: TermSize{Rows: 24, Cols: 80}, Resize: make(chan TermSize)},
	}
	for _, c := range ok {
		assert.NoError(t, c.Validate(), c.Args)
	}
	bad := map[string]Command{
		"nil args":      {},
		"empty program": {Args: []string{""}},
		"NUL arg":       {Args: []string{"a", "b\x00"}},
		"NUL dir":       {Args: []string{"a"}, Dir: "/x\x00"},
		"env no =":      {Args: []string{"a"}, Env: []string{"A"}},
		"env empty key": {Args: []string{"a"}, Env: []string{"=A"}},
		"env NUL":       {Args: []string{"a"}, Env: []string{"A=\x00"}},
		// Terminal fields without a terminal would be ignored: refused.
		"size without TTY":   {Args: []string{"a"}, TermSize: TermSize{Rows: 24, Cols: 80}},
		"resize without TTY": {Args: []string{"a"}, Resize: make(chan TermSize)},
		"zero dimension":     {Args: []string{"a"}, TTY: true, TermSize: TermSize{Rows: 24}},
	}
	for name, c := range bad {
		err := c.Validate()
		assert.ErrorIs(t, err, ErrInvalidCommand, name)
	}
}

func TestSpecValidate(t *testing.T) {
	dir := t.TempDir()
	good := Spec{Image: "busybox", Mounts: []Mount{{Source: dir, Target: "/a"}, {Source: dir, Target: "/b", ReadOnly: true}}}
	require.NoError(t, good.Validate())
	require.NoError(t, Spec{Image: "busybox", Dir: "/work"}.Validate())
	hardened := Spec{Image: "busybox", Runtime: "runsc", Security: Security{
		CapDrop: []string{"ALL"}, CapAdd: []string{"cap_chown", "KILL"}, NoNewPrivileges: true, ReadOnlyRootfs: true,
		Tmpfs: []Tmpfs{{Target: "/tmp", Options: "size=64m,mode=1777"}, {Target: "/run"}},
	}}
	require.NoError(t, hardened.Validate())
	// A source that is not on this machine may be on the Engine's host.
	require.NoError(t, Spec{Image: "x", Mounts: []Mount{{Source: "/no/such/path/here", Target: "/a"}}}.Validate())

	bad := map[string]Spec{
		"no image":          {},
		"relative source":   {Image: "x", Mounts: []Mount{{Source: "rel", Target: "/a"}}},
		"relative target":   {Image: "x", Mounts: []Mount{{Source: dir, Target: "a"}}},
		"root target":       {Image: "x", Mounts: []Mount{{Source: dir, Target: "/"}}},
		"duplicate targets": {Image: "x", Mounts: []Mount{{Source: dir, Target: "/a"}, {Source: dir, Target: "/a/."}}},
		"negative memory":   {Image: "x", Resources: Resources{MemoryBytes: -1}},
		"negative cpus":     {Image: "x", Resources: Resources{CPUs: -1}},
		"negative pids":     {Image: "x", Resources: Resources{Pids: -1}},
		"bad env":           {Image: "x", Env: []string{"X"}},
		"empty process":     {Image: "x", Process: []string{}},
		"empty label":       {Image: "x", Labels: map[string]string{"": "v"}},
		"runtime with /":    {Image: "x", Runtime: "/usr/bin/runsc"},
		"bad capability":    {Image: "x", Security: Security{CapDrop: []string{"NET RAW"}}},
		"empty capability":  {Image: "x", Security: Security{CapAdd: []string{""}}},
		"relative tmpfs":    {Image: "x", Security: Security{Tmpfs: []Tmpfs{{Target: "tmp"}}}},
		"root tmpfs":        {Image: "x", Security: Security{Tmpfs: []Tmpfs{{Target: "/"}}}},
		"tmpfs over mount":  {Image: "x", Mounts: []Mount{{Source: dir, Target: "/a"}}, Security: Security{Tmpfs: []Tmpfs{{Target: "/a/"}}}},
		"tmpfs bad options": {Image: "x", Security: Security{Tmpfs: []Tmpfs{{Target: "/t", Options: "size=1m mode=1"}}}},
		"relative dir":      {Image: "x", Dir: "tmp"},
	}
	for name, s := range bad {
		assert.ErrorIs(t, s.Validate(), ErrInvalidSpec, name)
	}
}

func TestErrUnsupportedMatchesStdlib(t *testing.T) {
	assert.True(t, errors.Is(ErrUnsupported, errors.ErrUnsupported))
}
