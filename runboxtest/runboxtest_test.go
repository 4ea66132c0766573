package runboxtest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
	"github.com/runbox-dev/runbox/runboxtest"
)

func TestMain(m *testing.M) {
	// First: the host sandbox's helper re-executes this test binary.
	runbox.Init()
	goleak.VerifyTestMain(m)
}

// dirs returns a writable and an outside directory that are visible inside
// the host sandbox (which replaces /tmp with a private one), and a secret
// file in a third.
func dirs(t *testing.T) (writable, outside, secretDir string) {
	base, err := os.MkdirTemp("/var/tmp", "runboxtest-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	writable, outside, secretDir = filepath.Join(base, "w"), filepath.Join(base, "o"), filepath.Join(base, "s")
	for _, d := range []string{writable, outside, secretDir} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	return writable, outside, secretDir
}

func newHost(t *testing.T, opts ...host.Option) *host.Executor {
	t.Helper()
	e, err := host.New(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, e.Close()) })
	return e
}

// TestHostUnconfined runs the suite against the plain host executor, whose
// claims are only what it enforces without a policy.
func TestHostUnconfined(t *testing.T) {
	w, _, _ := dirs(t)
	e := newHost(t)
	runboxtest.Run(t, runboxtest.Backend{
		Name: "host", Process: e, Claims: e.Guarantees(), Control: newHost(t), WritableDir: w,
	})
}

// TestHostConfined runs the suite against the Linux sandbox with a read
// boundary, so that every probe runs.
func TestHostConfined(t *testing.T) {
	w, o, s := dirs(t)
	secret := filepath.Join(s, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("hunter2\n"), 0o644))
	e := newHost(t, host.WithPolicy(host.Policy{
		WritableRoots: []string{w},
		ReadableRoots: append(host.SystemReadRoots(), o),
	}))
	g := e.Guarantees()
	require.Equal(t, runbox.GuaranteeLevelFull, g.Level, "%+v", g)
	require.True(t, g.ReadBoundary, "%+v", g)
	runboxtest.Run(t, runboxtest.Backend{
		Name: "host sandbox", Process: e, Claims: g, Control: newHost(t),
		WritableDir: w, OutsideDir: o, SecretFile: secret,
	})
}
