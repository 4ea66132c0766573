package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// inProcessAgent serves one connection from this test process, reaping
// its children as PID 1 would.
func inProcessAgent(t *testing.T) *Client {
	t.Helper()
	s := &server{waiters: map[int]chan unix.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	stop := make(chan struct{})
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			select {
			case <-sigs:
				s.reap(-1)
			case <-stop:
				return
			}
		}
	}()
	a, b := net.Pipe()
	served := make(chan struct{})
	go func() { s.handle(a); close(served) }()
	c, err := NewClient(b, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		<-served
		signal.Stop(sigs)
		close(stop)
		<-reaped
	})
	return c
}

func run(t *testing.T, c *Client, req StartRequest, stdin io.Reader) (string, string, Exit, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	ex, err := c.Run(ctx, req, RunOptions{Stdin: stdin, Stdout: &out, Stderr: &errb})
	return out.String(), errb.String(), ex, err
}

func TestAgentRunsCommands(t *testing.T) {
	c := inProcessAgent(t)
	out, errs, ex, err := run(t, c, StartRequest{Args: []string{"sh", "-c", "cat; echo e >&2; exit 3"}}, strings.NewReader("in"))
	require.NoError(t, err)
	assert.Equal(t, Exit{Code: 3}, ex)
	assert.Equal(t, "in", out)
	assert.Equal(t, "e\n", errs)

	out, _, _, err = run(t, c, StartRequest{Args: []string{"env"}, CleanEnv: true}, nil)
	require.NoError(t, err)
	assert.Empty(t, out, "CleanEnv without entries is an empty environment, not the agent's")

	out, _, _, err = run(t, c, StartRequest{Args: []string{"pwd"}, Dir: "/"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "/\n", out)

	_, _, ex, err = run(t, c, StartRequest{Args: []string{"sh", "-c", "kill -KILL $$"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, Exit{Code: 137, Signal: "SIGKILL"}, ex)

	for _, req := range []StartRequest{
		{Args: []string{"runbox-no-such-program"}},
		{Args: []string{"/etc/passwd"}},
		{Args: []string{"true"}, Dir: "/no/such/dir"},
	} {
		_, _, _, err := run(t, c, req, nil)
		var se *StartError
		assert.ErrorAs(t, err, &se, req.Args)
	}
}

func TestAgentStdinWindow(t *testing.T) {
	c := inProcessAgent(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), (3*StdinWindow)/16)
	out, _, ex, err := run(t, c, StartRequest{Args: []string{"wc", "-c"}}, bytes.NewReader(data))
	require.NoError(t, err)
	assert.Equal(t, 0, ex.Code)
	assert.Equal(t, len(data), atoi(t, strings.TrimSpace(out)))

	// A command that never reads stdin: the connection stays usable and a
	// cancel gets through.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Run(ctx, StartRequest{Args: []string{"sleep", "1000"}}, RunOptions{Stdin: bytes.NewReader(make([]byte, 4*StdinWindow))})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	out, _, _, err = run(t, c, StartRequest{Args: []string{"echo", "ok"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, "ok\n", out)
}

func atoi(t *testing.T, s string) int {
	n := 0
	for _, r := range s {
		require.True(t, r >= '0' && r <= '9', s)
		n = n*10 + int(r-'0')
	}
	return n
}

func TestClientFailsPendingCallsOnBadFrames(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	hello := make(chan error, 1)
	go func() {
		r := NewReader(a)
		if _, err := r.Next(); err != nil {
			hello <- err
			return
		}
		hello <- WriteJSON(a, TypeHello, 0, Hello{Version: Version})
		_, _ = r.Next() // the start request
		_, _ = a.Write([]byte{Version, 0xee, 0, 0, 0, 1, 0, 0, 0, 0})
	}()
	c, err := NewClient(b, 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, <-hello)
	defer c.Close()
	_, err = c.Run(context.Background(), StartRequest{Args: []string{"true"}}, RunOptions{})
	require.ErrorIs(t, err, ErrConnectionLost)
	assert.True(t, errors.Is(c.Err(), ErrProtocol), "%v", c.Err())
}

func TestHandshakeTimesOut(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { _, _ = io.Copy(io.Discard, a) }()
	_, err := NewClient(b, 100*time.Millisecond)
	require.Error(t, err)
}
