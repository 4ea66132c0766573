package reexec

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

const testHelper = "reexec-test-helper"

func init() { Register(testHelper, func() int { return 7 }) }

func TestMain(m *testing.M) {
	Dispatch()
	goleak.VerifyTestMain(m)
}

// The helper named by Env runs instead of the program and its status is the
// process's; an unknown name is refused with 125, never run as the program.
func TestDispatchRunsTheNamedHelper(t *testing.T) {
	assert.True(t, Initialized(), "Dispatch returned in the test process")
	for name, want := range map[string]int{testHelper: 7, "no-such-helper": 125} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), Env+"="+name)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%s: %v %s", name, err, out)
		assert.Equal(t, want, ee.ExitCode(), "%s: %s", name, out)
	}
}

func TestRegisterRefusesBadNames(t *testing.T) {
	assert.Panics(t, func() { Register(testHelper, func() int { return 0 }) }, "duplicate")
	assert.Panics(t, func() { Register("a=b", func() int { return 0 }) })
	assert.Panics(t, func() { RegisterPath("relative/path", func() int { return 0 }) })
}
