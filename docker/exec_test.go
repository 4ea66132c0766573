package docker

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
)

func TestExecveGate(t *testing.T) {
	for name, c := range map[string]struct {
		writes  []string
		other   bool
		code    int
		arg0    string
		failure string // "" when the output is the program's
	}{
		"runc's line":            {writes: []string{"exec /bin/true: argument list too long\n"}, code: 1, arg0: "true", failure: "exec /bin/true: argument list too long"},
		"in pieces":              {writes: []string{"ex", "ec /x: exec format", " error\n"}, code: 1, arg0: "/x", failure: "exec /x: exec format error"},
		"terminal line end":      {writes: []string{"exec /bin/true: permission denied\r\n"}, code: 1, arg0: "true", failure: "exec /bin/true: permission denied"},
		"exit code 2":            {writes: []string{"exec /bin/true: permission denied\n"}, code: 2, arg0: "true"},
		"another program":        {writes: []string{"exec /bin/true: permission denied\n"}, code: 1, arg0: "sh"},
		"a path, not the same":   {writes: []string{"exec /bin/true: permission denied\n"}, code: 1, arg0: "./true"},
		"not an errno":           {writes: []string{"exec /bin/true: it did not work\n"}, code: 1, arg0: "true"},
		"more after the line":    {writes: []string{"exec /bin/true: permission denied\n", "x"}, code: 1, arg0: "true"},
		"no line end":            {writes: []string{"exec /bin/true: permission denied"}, code: 1, arg0: "true"},
		"other stream had bytes": {writes: []string{"exec /bin/true: permission denied\n"}, other: true, code: 1, arg0: "true"},
		"other output":           {writes: []string{"hello\n"}, code: 1, arg0: "true"},
	} {
		var out bytes.Buffer
		g := &execveGate{w: &out, holding: true}
		for _, w := range c.writes {
			n, err := g.Write([]byte(w))
			assert.NoError(t, err, name)
			assert.Equal(t, len(w), n, name)
		}
		if c.other {
			_, _ = (&otherStream{w: &bytes.Buffer{}, seen: g}).Write([]byte("o"))
		}
		msg, _, ok := g.failure(c.code, c.arg0)
		assert.Equal(t, c.failure, msg, name)
		assert.Equal(t, c.failure != "", ok, name)
		if !ok {
			assert.NoError(t, g.release())
			var all string
			for _, w := range c.writes {
				all += w
			}
			assert.Equal(t, all, out.String(), name+": everything reaches the caller, once")
		}
	}
}

func TestCheckReservedMounts(t *testing.T) {
	for _, target := range []string{"/dev/.runbox", "/dev/.runbox/", "/dev//.runbox", "/dev/./.runbox/run",
		"/dev/.runbox/bin/runbox", "/dev/.runbox/../.runbox", "/tmp/../dev/.runbox", "/dev", "/dev/", "/"} {
		err := checkReservedMounts([]runbox.Mount{{Source: "/tmp", Target: "/mnt"}, {Source: "/tmp", Target: target}})
		assert.ErrorIs(t, err, runbox.ErrInvalidSpec, target)
	}
	for _, target := range []string{"/dev/.runbox-not", "/dev/.runboxx/run", "/dev/shm", "/devices", "/mnt/dev/.runbox"} {
		assert.NoError(t, checkReservedMounts([]runbox.Mount{{Source: "/tmp", Target: target}}), target)
	}
}

func TestOwnerLabel(t *testing.T) {
	o, ok := ParseOwner(defaultOwner())
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), o.PID)
	assert.NotEmpty(t, o.Start, "Linux tells the start time")
	assert.Equal(t, defaultOwner(), o.String())
	for label, want := range map[string]Owner{
		"h/12/345": {Host: "h", PID: 12, Start: "345"},
		"h/12":     {Host: "h", PID: 12},
	} {
		got, ok := ParseOwner(label)
		assert.True(t, ok, label)
		assert.Equal(t, want, got, label)
		assert.Equal(t, label, got.String())
	}
	for _, bad := range []string{"", "h", "h/cli", "h/0", "h/-1", "/12", "h/12/", "h/12/3/4", "h/x12"} {
		_, ok := ParseOwner(bad)
		assert.False(t, ok, bad)
	}
}
