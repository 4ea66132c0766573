package procstart

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOf(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		_, err := Of(os.Getpid())
		assert.ErrorIs(t, err, ErrUnknown)
		return
	}
	me, err := Of(os.Getpid())
	require.NoError(t, err)
	again, err := Of(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, me, again, "one process, one start")
	assert.NotEmpty(t, me.ID)
	assert.NotContains(t, me.ID, "/")
	assert.WithinDuration(t, time.Now(), me.Time, time.Hour, "this test process started a moment ago")

	// A process started later has another start. One started within this
	// process's clock tick would share its ID, so a child is started again
	// (with a deadline) until the tick has passed, instead of sleeping.
	var child Start
	for deadline := time.Now().Add(30 * time.Second); ; {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		require.NoError(t, cmd.Start())
		child, err = Of(cmd.Process.Pid)
		_ = cmd.Wait()
		require.NoError(t, err)
		if child.ID != me.ID || time.Now().After(deadline) {
			break
		}
	}
	assert.NotEqual(t, me.ID, child.ID)
	assert.False(t, child.Time.Before(me.Time.Add(-time.Second)))

	_, err = Of(0)
	assert.Error(t, err)
}
