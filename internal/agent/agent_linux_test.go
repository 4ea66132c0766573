package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox/internal/execpath"
	"golang.org/x/sys/unix"
)

// inProcessAgent serves one connection from this test process, reaping
// its children as PID 1 would.
func inProcessAgent(t *testing.T) *Client {
	t.Helper()
	c, err := inProcessAgentKeyed(t, nil, nil)
	require.NoError(t, err)
	return c
}

// inProcessAgentKeyed serves one connection with an agent that holds
// agentKey, reached by a client that holds clientKey.
func inProcessAgentKeyed(t *testing.T, agentKey, clientKey []byte) (*Client, error) {
	t.Helper()
	b := inProcessServer(t, agentKey)
	c, err := NewClient(b, ClientOptions{Timeout: 5 * time.Second, Key: clientKey})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// inProcessServer serves one connection from this test process, reaping
// its children as PID 1 would, and returns the client's end.
func inProcessServer(t *testing.T, key []byte) net.Conn {
	t.Helper()
	s := &server{waiters: map[int]chan unix.WaitStatus{}, key: key}
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
	t.Cleanup(func() {
		b.Close()
		<-served
		signal.Stop(sigs)
		close(stop)
		<-reaped
	})
	return b
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
	c, err := NewClient(b, ClientOptions{Timeout: 5 * time.Second})
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
	_, err := NewClient(b, ClientOptions{Timeout: 100 * time.Millisecond})
	require.Error(t, err)
}

func TestKeyedHandshake(t *testing.T) {
	key := NewKey()
	c, err := inProcessAgentKeyed(t, key, key)
	require.NoError(t, err)
	out, _, ex, err := run(t, c, StartRequest{Args: []string{"echo", "authenticated"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, Exit{}, ex)
	assert.Equal(t, "authenticated\n", out)

	// A client without the key is refused before it can start anything.
	marker := filepath.Join(t.TempDir(), "pwned")
	c, err = inProcessAgentKeyed(t, key, nil)
	require.NoError(t, err, "a keyless client learns of the refusal at its first request")
	_, _, _, err = run(t, c, StartRequest{Args: []string{"touch", marker}}, nil)
	require.ErrorIs(t, err, ErrConnectionLost)
	assert.NoFileExists(t, marker)
	_, err = inProcessAgentKeyed(t, key, NewKey())
	require.ErrorIs(t, err, ErrAuth, "an agent with another key is not the session's")
}

// TestClientRefusesAnImpostor: a peer that answers hello without the key
// gets nothing further, above all no start request.
func TestClientRefusesAnImpostor(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	got := make(chan []Type, 1)
	go func() {
		r := NewReader(a)
		var types []Type
		for {
			f, err := r.Next()
			if err != nil {
				got <- types
				return
			}
			types = append(types, f.Type)
			if f.Type == TypeHello {
				_ = WriteJSON(a, TypeHello, 0, Hello{Version: Version, Nonce: random(NonceSize), Proof: random(32)})
			}
		}
	}()
	_, err := NewClient(b, ClientOptions{Timeout: 5 * time.Second, Key: NewKey()})
	require.ErrorIs(t, err, ErrAuth)
	assert.Equal(t, []Type{TypeHello}, <-got, "the client sent nothing after the impostor's hello")
}

// TestLargeStartRequests: a request larger than one frame runs; one larger
// than Linux can exec fails alone, and the connection stays usable.
func TestLargeStartRequests(t *testing.T) {
	c := inProcessAgent(t)
	args := []string{"sh", "-c", `echo $#`, "sh"}
	for range 100_000 {
		args = append(args, "0123456789abcdef")
	}
	out, _, ex, err := run(t, c, StartRequest{Args: args[:60_000]}, nil)
	require.NoError(t, err, "60 000 arguments of 16 bytes fit Linux's limit")
	assert.Equal(t, Exit{}, ex)
	assert.Equal(t, "59996\n", out)

	_, _, _, err = run(t, c, StartRequest{Args: args}, nil)
	var se *StartError
	require.ErrorAs(t, err, &se, "beyond the kernel's limit: the exec fails")
	assert.Contains(t, se.Message, "argument list too long")

	_, _, _, err = run(t, c, StartRequest{Args: []string{"true"}, Env: []string{"BIG=" + strings.Repeat("x", 1<<20)}}, nil)
	require.ErrorAs(t, err, &se, "a single 1 MiB string is more than Linux takes")

	_, _, _, err = run(t, c, StartRequest{Args: []string{"true"}, Env: []string{"BIG=" + strings.Repeat("x", 7<<20)}}, nil)
	require.ErrorIs(t, err, ErrTooLarge)

	out, _, _, err = run(t, c, StartRequest{Args: []string{"echo", "still here"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, "still here\n", out)
}

// TestOversizedRequestFailsAlone: the agent refuses a request beyond its
// bound without ending the connection.
func TestOversizedRequestFailsAlone(t *testing.T) {
	b := inProcessServer(t, nil)
	r := NewReader(b)
	go func() {
		_ = WriteJSON(b, TypeHello, 0, Hello{Version: Version})
		chunk := make([]byte, MaxPayload)
		for range MaxStartRequest/MaxPayload + 1 {
			_ = WriteFrame(b, Frame{Type: TypeStartPart, ID: 1, Payload: chunk})
		}
		_ = WriteFrame(b, Frame{Type: TypeStart, ID: 1, Payload: []byte("{}")})
		_ = WriteJSON(b, TypeStart, 2, StartRequest{Args: []string{"true"}})
		_ = WriteFrame(b, Frame{Type: TypeStdinEOF, ID: 2})
	}()
	var seen []string
	for {
		f, err := r.Next()
		require.NoError(t, err)
		seen = append(seen, fmt.Sprintf("%s:%d", f.Type, f.ID))
		if f.Type == TypeExit {
			break
		}
	}
	assert.Equal(t, []string{"hello:0", "start-failed:1", "started:2", "exit:2"}, seen)
}

func TestStartReason(t *testing.T) {
	dir := t.TempDir()
	plain := dir + "/plain"
	require.NoError(t, os.WriteFile(plain, nil, 0o644))
	_, err := execpath.Look("/no/such/program", "", "")
	assert.Equal(t, ReasonNotFound, startReason(err))
	_, err = execpath.Look("no-such-program", "", dir)
	assert.Equal(t, ReasonNotFound, startReason(err))
	_, err = execpath.Look(plain, "", "")
	assert.Equal(t, ReasonNotExecutable, startReason(err))
	_, err = execpath.Look(dir, "", "")
	assert.Equal(t, ReasonNotExecutable, startReason(err))
	assert.Empty(t, startReason(errors.New("something else")))
}

func TestLookupUser(t *testing.T) {
	dir := t.TempDir()
	passwd, group := filepath.Join(dir, "passwd"), filepath.Join(dir, "group")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\nalice:x:1001:1002::/home/alice:/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(group, []byte("root:x:0:\nalice:x:1002:\nteam:x:1003:alice,bob\nother:x:1004:bob\n"), 0o644))
	for _, c := range []struct {
		spec             string
		uid, gid         uint32
		groups           []uint32
		wantErr, errPart string
	}{
		{spec: "alice", uid: 1001, gid: 1002, groups: []uint32{1003}},
		{spec: "1001", uid: 1001, gid: 1002, groups: []uint32{1003}},
		{spec: "alice:team", uid: 1001, gid: 1003, groups: []uint32{1003}},
		{spec: "alice:77", uid: 1001, gid: 77, groups: []uint32{1003}},
		{spec: "4242", uid: 4242, gid: 0, groups: []uint32{}},
		{spec: "4242:4343", uid: 4242, gid: 4343, groups: []uint32{}},
		{spec: "nobody", wantErr: "unable to find user nobody"},
		{spec: "alice:nogroup", wantErr: "unable to find group nogroup"},
		{spec: ":1", wantErr: "want user[:group]"},
	} {
		cred, err := lookupUserIn(c.spec, passwd, group)
		if c.wantErr != "" {
			assert.ErrorContains(t, err, c.wantErr, c.spec)
			continue
		}
		require.NoError(t, err, c.spec)
		assert.Equal(t, c.uid, cred.Uid, c.spec)
		assert.Equal(t, c.gid, cred.Gid, c.spec)
		assert.Equal(t, c.groups, cred.Groups, c.spec)
	}
}

// TestNoStdin: a command run without input finds its stdin at end of file
// at once, with no started or stdin-eof frame in between.
func TestNoStdin(t *testing.T) {
	c := inProcessAgent(t)
	require.True(t, c.noStdin, "the agent says it honours NoStdin")
	out, _, ex, err := run(t, c, StartRequest{Args: []string{"sh", "-c", "cat; echo done"}}, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, ex.Code)
	assert.Equal(t, "done\n", out)
	out, _, _, err = run(t, c, StartRequest{Args: []string{"cat"}}, strings.NewReader("given"))
	require.NoError(t, err)
	assert.Equal(t, "given", out, "with input, stdin still flows")
}

// TestNoStdinOlderAgent: an agent whose hello offers neither NoStdin nor
// Discard is asked as before (pipes for every stream), and sent the
// stdin-eof frame once the command started.
func TestNoStdinOlderAgent(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	frames := make(chan Frame, 8)
	go func() {
		defer close(frames)
		r := NewReader(a)
		if _, err := r.Next(); err != nil {
			return
		}
		if WriteJSON(a, TypeHello, 0, Hello{Version: Version}) != nil {
			return
		}
		start, err := r.Next()
		if err != nil {
			return
		}
		frames <- Frame{Type: start.Type, ID: start.ID, Payload: append([]byte(nil), start.Payload...)}
		if WriteJSON(a, TypeStarted, start.ID, Started{Pid: 7}) != nil {
			return
		}
		eof, err := r.Next()
		if err != nil {
			return
		}
		frames <- Frame{Type: eof.Type, ID: eof.ID}
		_ = WriteJSON(a, TypeExit, start.ID, Exit{Code: 0})
	}()
	c, err := NewClient(b, ClientOptions{Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	require.False(t, c.noStdin)
	require.False(t, c.discard)
	ex, err := c.Run(context.Background(), StartRequest{Args: []string{"cat"}}, RunOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, ex.Code)
	start := <-frames
	var req StartRequest
	require.NoError(t, Decode(start, &req))
	assert.False(t, req.NoStdin)
	assert.False(t, req.DiscardStdout || req.DiscardStderr, "an older agent would send the output anyway")
	assert.Equal(t, TypeStdinEOF, (<-frames).Type)
}

// TestDiscardedOutput: a stream the caller does not take is /dev/null for
// the command, as os/exec gives for a nil Stdout, so that none of it
// crosses the connection; a stream the caller takes is a pipe.
func TestDiscardedOutput(t *testing.T) {
	c := inProcessAgent(t)
	require.True(t, c.discard, "the agent says it honours Discard")
	probe := StartRequest{Args: []string{"sh", "-c", "r=$(readlink /proc/$$/fd/0 /proc/$$/fd/1); echo $r >&2; head -c 4000000 /dev/zero"}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb bytes.Buffer
	ex, err := c.Run(ctx, probe, RunOptions{Stderr: &errb})
	require.NoError(t, err)
	assert.Equal(t, 0, ex.Code)
	assert.Equal(t, "/dev/null /dev/null\n", errb.String(), "stdin (no input) and stdout (discarded)")

	out, errs, ex, err := run(t, c, probe, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, ex.Code)
	assert.Len(t, out, 4000000, "a stream the caller takes arrives whole")
	assert.Regexp(t, `^/dev/null pipe:\[\d+\]\n$`, errs)

	// Discarding stdout leaves stderr, and the other way round.
	call, err := c.Start(StartRequest{Args: []string{"sh", "-c", "echo out; echo err >&2"}, NoStdin: true, DiscardStdout: true})
	require.NoError(t, err)
	defer call.Abandon()
	var got []Type
	for f := range call.Events() {
		got = append(got, f.Type)
		if f.Type == TypeExit {
			break
		}
	}
	assert.Equal(t, []Type{TypeStderr, TypeExit}, got)
}

// TestEndDuringHandshake: a session whose lifetime process ends while a
// caller is still shaking hands tells that caller too, instead of running
// its commands as if nothing had happened (seen in CI: Run(true) kept
// succeeding until the lease ran out).
func TestEndDuringHandshake(t *testing.T) {
	s := &server{waiters: map[int]chan unix.WaitStatus{}, conns: map[*conn]bool{}}
	s.afterHandshake = func() { s.end("the lifetime process exited with code 5", 5) }
	a, b := net.Pipe()
	served := make(chan struct{})
	go func() { s.handle(a); close(served) }()
	t.Cleanup(func() { b.Close(); <-served })
	c, err := NewClient(b, ClientOptions{Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	// A command sent before the news arrives starts nothing, and the
	// caller learns the end, not a broken connection.
	_, err = c.Run(context.Background(), StartRequest{Args: []string{"true"}}, RunOptions{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrSessionOver)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the caller was never told that the session ended")
	}
	var over *SessionOverError
	require.ErrorAs(t, c.Err(), &over)
	assert.Contains(t, over.Message, "code 5")
}
