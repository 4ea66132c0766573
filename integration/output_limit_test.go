//go:build linux

package integration

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

// TestRunOutputLimitOnBothBackends: Command.OutputLimit is a property of
// every backend's Run: the command is stopped, the output up to the limit
// is delivered, the error wraps ErrOutputLimit, and the next Run works.
func TestRunOutputLimitOnBothBackends(t *testing.T) {
	hostExec, err := host.New()
	require.NoError(t, err)
	runners := map[string]runbox.Process{
		"host":         hostExec,
		"docker agent": open(t, agentExecutor(t), baseSpec()),
	}
	flood := []string{"sh", "-c", "yes out | head -c 100000000; yes err | head -c 100000000 >&2"}
	for name, r := range runners {
		t.Run(name, func(t *testing.T) {
			for _, lim := range []runbox.OutputLimit{{Stream: 1000}, {Combined: 1500}} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var out, errb bytes.Buffer
				res, err := r.Run(ctx, runbox.Command{Args: flood, OutputLimit: lim}, runbox.Streams{Stdout: &out, Stderr: &errb})
				cancel()
				require.ErrorIs(t, err, runbox.ErrOutputLimit, "%+v", lim)
				assert.Equal(t, -1, res.ExitCode, "no exit code is invented")
				if lim.Stream > 0 {
					assert.Equal(t, 1000, out.Len())
				} else {
					assert.Equal(t, 1500, out.Len()+errb.Len())
				}
			}
			var out bytes.Buffer
			res, err := r.Run(context.Background(), runbox.Command{Args: []string{"echo", "next"}, OutputLimit: runbox.OutputLimit{Stream: 1000}},
				runbox.Streams{Stdout: &out})
			require.NoError(t, err, "under the limit nothing changes")
			assert.Equal(t, 0, res.ExitCode)
			assert.Equal(t, "next\n", out.String())
		})
	}
}
