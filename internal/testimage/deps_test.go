package testimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripts/deps, which `make demo` and `make test` run first, calls a
// busybox static exactly when Busybox would take it: a dynamic one (Debian's
// plain busybox package) is named as missing there, not found to be
// unusable only when the image is built.
func TestDepsAgreesOnStatic(t *testing.T) {
	bb, err := Busybox()
	require.NoError(t, err, "the test machine has a static busybox")
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	sh, err = filepath.EvalSymlinks(sh)
	require.NoError(t, err)
	require.Error(t, checkStatic(sh), "%s is dynamic here: the negative case proves nothing otherwise", sh)

	deps := func(busybox string) (int, string) {
		cmd := exec.Command("../../scripts/deps")
		cmd.Env = append(os.Environ(), EnvBusybox+"="+busybox, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := deps(sh)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "not a static executable")

	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed: scripts/deps would install it")
	}
	code, out = deps(bb)
	assert.Equal(t, 0, code, out)
}
