//go:build linux

package integration

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/host"
)

// TestStarterOnBothBackends: one root interface starts a streaming
// process from a runbox.Command on the host and in a Docker session, with
// no type assertion; fields that a started process replaces are refused.
func TestStarterOnBothBackends(t *testing.T) {
	hostExec, err := host.New()
	require.NoError(t, err)
	var s runbox.Session = open(t, agentExecutor(t), baseSpec())
	for name, st := range map[string]runbox.Starter{"host": hostExec, "docker": s} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := st.Start(ctx, runbox.Command{Args: []string{"sh", "-c", "read x; echo got $x; echo err >&2; exit 5"}})
			require.NoError(t, err)
			defer p.Close(context.Background())
			_, err = io.WriteString(p.Stdin(), "line\n")
			require.NoError(t, err)
			require.NoError(t, p.Stdin().Close())
			errc := make(chan string, 1)
			go func() { b, _ := io.ReadAll(p.Stderr()); errc <- string(b) }()
			out, err := io.ReadAll(p.Stdout())
			require.NoError(t, err)
			assert.Equal(t, "got line\n", string(out))
			assert.Equal(t, "err\n", <-errc)
			res, err := p.Wait(ctx)
			require.NoError(t, err)
			assert.Equal(t, 5, res.ExitCode)

			_, err = st.Start(ctx, runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("x")})
			require.ErrorIs(t, err, runbox.ErrInvalidCommand, "Command.Stdin would be ignored")
		})
	}
}
