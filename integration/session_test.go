package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
)

func TestRunArgvIsLiteral(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())
	o := run(t, s, argv("echo", "$HOME", ";", "*", "`id`", "a b"))
	require.NoError(t, o.err)
	assert.Equal(t, "$HOME ; * `id` a b\n", o.stdout)
	assert.Equal(t, runbox.Result{ExitCode: 0}, o.res)

	o = run(t, s, runbox.ShellCommand("echo $((6*7))"))
	require.NoError(t, o.err)
	assert.Equal(t, "42\n", o.stdout)
}

func TestRunStreamsAndExitCodes(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())

	o := run(t, s, runbox.ShellCommand("echo out; echo err >&2; exit 7"))
	require.NoError(t, o.err, "a nonzero exit is a Result, not an error")
	assert.Equal(t, 7, o.res.ExitCode)
	assert.Equal(t, "out\n", o.stdout)
	assert.Equal(t, "err\n", o.stderr)

	// 127 from a shell that ran is a real exit code, not a launch failure.
	o = run(t, s, runbox.ShellCommand("no-such-program"))
	require.NoError(t, o.err)
	assert.Equal(t, 127, o.res.ExitCode)

	// nil writers discard.
	_, err := s.Run(context.Background(), argv("echo", "dropped"), runbox.Streams{})
	require.NoError(t, err)
}

func TestRunLaunchFailuresAreErrors(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())
	cases := map[string]runbox.Command{
		"not found":      argv("/no/such/program"),
		"not in PATH":    argv("no-such-program"),
		"not executable": argv("/etc/passwd"),
		"bad dir":        {Args: []string{"true"}, Dir: "/no/such/dir"},
	}
	for name, cmd := range cases {
		t.Run(name, func(t *testing.T) {
			o := run(t, s, cmd)
			require.Error(t, o.err)
			assert.ErrorIs(t, o.err, runbox.ErrStart)
			assert.Equal(t, runbox.Result{ExitCode: -1}, o.res, "no exit code is invented")
			assert.Empty(t, o.stdout, "the Engine's message is the error, not output")
		})
	}
	// The session is still usable.
	o := run(t, s, argv("true"))
	require.NoError(t, o.err)
}

func TestRunDirAndEnv(t *testing.T) {
	e := newExecutor(t)
	spec := baseSpec()
	spec.Env = []string{"FROM_SPEC=yes"}
	s := open(t, e, spec)

	o := run(t, s, runbox.Command{Args: []string{"pwd"}, Dir: "/tmp"})
	require.NoError(t, o.err)
	assert.Equal(t, "/tmp\n", o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"env"}, Env: []string{"ADDED=1", "FROM_SPEC=overridden"}})
	require.NoError(t, o.err)
	env := strings.Split(strings.TrimSpace(o.stdout), "\n")
	assert.Contains(t, env, "ADDED=1")
	assert.Contains(t, env, "FROM_SPEC=overridden")
	assert.Contains(t, env, testimage.ImageEnv, "Env augments the image's environment")

	// The Engine cannot clear the container's environment for an exec; the
	// request is refused, never silently ignored.
	o = run(t, s, runbox.Command{Args: []string{"env"}, CleanEnv: true})
	require.Error(t, o.err)
	assert.ErrorIs(t, o.err, runbox.ErrUnsupported)
	assert.ErrorIs(t, o.err, errors.ErrUnsupported)
	assert.Empty(t, o.stdout)
}

func TestRunStdin(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())

	o := run(t, s, runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")})
	require.NoError(t, o.err)
	assert.Equal(t, "hello\nworld\n", o.stdout)

	// nil Stdin is an immediate EOF: cat ends instead of waiting.
	o = run(t, s, argv("cat"))
	require.NoError(t, o.err)
	assert.Empty(t, o.stdout)

	o = run(t, s, runbox.Command{Args: []string{"wc", "-c"}, Stdin: bytes.NewReader(make([]byte, 3<<20))})
	require.NoError(t, o.err)
	assert.Equal(t, fmt.Sprint(3<<20), strings.TrimSpace(o.stdout))
}

func TestRunBinaryOutputIsExact(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())
	data := make([]byte, 5<<20+17)
	_, _ = rand.Read(data)
	sum := sha256.Sum256(data)

	o := run(t, s, runbox.Command{Args: []string{"sh", "-c", "cat > /tmp/blob && sha256sum /tmp/blob"}, Stdin: bytes.NewReader(data)})
	require.NoError(t, o.err)
	assert.Equal(t, hex.EncodeToString(sum[:]), strings.Fields(o.stdout)[0], "stdin arrives byte-exact")

	var out, errb bytes.Buffer
	res, err := s.Run(context.Background(), runbox.Command{Args: []string{"sh", "-c", "cat /tmp/blob; cat /tmp/blob >&2"}},
		runbox.Streams{Stdout: &out, Stderr: &errb})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.True(t, bytes.Equal(data, out.Bytes()), "stdout differs")
	assert.True(t, bytes.Equal(data, errb.Bytes()), "stderr differs")
}

func TestRunCancellation(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())

	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errc := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, runbox.ShellCommand("echo started; exec sleep 1000"), runbox.Streams{Stdout: &out})
		errc <- err
	}()
	require.Eventually(t, func() bool { return out.String() == "started\n" }, time.Minute, 10*time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		require.Error(t, err)
		assert.ErrorIs(t, err, runbox.ErrCancelled)
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Run did not return after cancellation")
	}

	// What docs/docker.md claims: plain Engine exec cannot be killed, so
	// the started process keeps running until it ends or the session
	// closes, and the session stays usable.
	top, err := e.Client().ContainerTop(context.Background(), s.ID(), client.ContainerTopOptions{})
	require.NoError(t, err)
	assert.True(t, topHas(top, "sleep 1000"), "the cancelled command is still running: %v", top.Processes)
	o := run(t, s, argv("echo", "still usable"))
	require.NoError(t, o.err)
	assert.Equal(t, "still usable\n", o.stdout)

	// An already cancelled context starts nothing.
	_, err = s.Run(ctx, argv("true"), runbox.Streams{})
	assert.ErrorIs(t, err, runbox.ErrCancelled)
}

func topHas(top client.ContainerTopResult, cmd string) bool {
	for _, p := range top.Processes {
		if strings.Contains(strings.Join(p, " "), cmd) {
			return true
		}
	}
	return false
}

func TestNetworkPolicy(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())
	o := run(t, s, argv("ls", "/sys/class/net"))
	require.NoError(t, o.err)
	assert.Equal(t, "lo\n", o.stdout, "the default network is none: loopback only")

	spec := baseSpec()
	spec.Network = runbox.NetworkBridge
	s = open(t, e, spec)
	o = run(t, s, argv("ls", "/sys/class/net"))
	require.NoError(t, o.err)
	assert.Contains(t, o.stdout, "eth0")
}

func TestMounts(t *testing.T) {
	e := newExecutor(t)
	rw, ro := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ro, "given"), []byte("from host"), 0o644))
	spec := baseSpec()
	spec.Mounts = []runbox.Mount{{Source: rw, Target: "/rw"}, {Source: ro, Target: "/ro", ReadOnly: true}}
	s := open(t, e, spec)

	o := run(t, s, runbox.ShellCommand("echo written > /rw/out && cat /ro/given"))
	require.NoError(t, o.err)
	assert.Equal(t, 0, o.res.ExitCode)
	assert.Equal(t, "from host", o.stdout)
	got, err := os.ReadFile(filepath.Join(rw, "out"))
	require.NoError(t, err)
	assert.Equal(t, "written\n", string(got))

	o = run(t, s, runbox.ShellCommand("echo x > /ro/new"))
	require.NoError(t, o.err)
	assert.NotEqual(t, 0, o.res.ExitCode, "a read-only mount refuses writes")
	assert.Contains(t, o.stderr, "Read-only file system")
	assert.NoFileExists(t, filepath.Join(ro, "new"))
}

func TestOpenLabelsAndResources(t *testing.T) {
	e := newExecutor(t, docker.WithOwner("test-owner"))
	spec := baseSpec()
	spec.Resources = runbox.Resources{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 64}
	spec.User = "65534"
	s := open(t, e, spec)
	c, err := e.Client().ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	labels := c.Container.Config.Labels
	assert.Equal(t, docker.KindSession, labels[docker.LabelKind])
	assert.Equal(t, "test-owner", labels[docker.LabelOwner])
	created, err := time.Parse(time.RFC3339, labels[docker.LabelCreated])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), created, 10*time.Minute)
	assert.Equal(t, runID, labels[labelRun])

	hc := c.Container.HostConfig
	assert.Equal(t, int64(64<<20), hc.Memory)
	assert.Equal(t, int64(5e8), hc.NanoCPUs)
	require.NotNil(t, hc.PidsLimit)
	assert.Equal(t, int64(64), *hc.PidsLimit)
	assert.Equal(t, "none", string(hc.NetworkMode))

	o := run(t, s, argv("id", "-u"))
	require.NoError(t, o.err)
	assert.Equal(t, "65534\n", o.stdout)
}

func TestLifetimeProcessThatEndsIsReported(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	spec := baseSpec()
	spec.Process = []string{"sh", "-c", "exit 3"}
	spec.Init = false
	s, err := e.Open(context.Background(), spec)
	if err == nil {
		// The process may still have been starting when Open looked; the
		// session then reports the end on first use.
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		require.Eventually(t, func() bool {
			_, err = s.Run(context.Background(), argv("true"), runbox.Streams{})
			return err != nil
		}, time.Minute, 20*time.Millisecond)
	}
	require.ErrorIs(t, err, runbox.ErrSessionEnded)
	assert.Contains(t, err.Error(), "code 3")
	if s == nil {
		assert.Empty(t, containersOfRun(t, cli), "a failed Open leaves no container")
	}
}

func TestFailedOpenLeavesNothing(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()

	// Without an init the Engine itself reports a lifetime process that
	// cannot be started. (With Spec.Init the init starts and the failure
	// shows as ErrSessionEnded on first use; see
	// TestLifetimeProcessThatEndsIsReported.)
	spec := baseSpec()
	spec.Init = false
	spec.Process = []string{"/no/such/init"}
	_, err := e.Open(context.Background(), spec)
	require.ErrorIs(t, err, runbox.ErrStart)
	assert.Empty(t, containersOfRun(t, cli))

	spec = baseSpec()
	spec.Image = "runbox-test/absent:" + runID
	_, err = e.Open(context.Background(), spec)
	require.ErrorIs(t, err, runbox.ErrImageUnavailable)
	assert.Empty(t, containersOfRun(t, cli))

	// The fixture image has no command of its own.
	spec = baseSpec()
	spec.Process = nil
	_, err = e.Open(context.Background(), spec)
	require.Error(t, err)
	assert.Empty(t, containersOfRun(t, cli))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = e.Open(ctx, baseSpec())
	require.Error(t, err)
	assert.Empty(t, containersOfRun(t, cli))
}

func TestBadInputCreatesNothing(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	dir := t.TempDir()
	withSpec := func(f func(*runbox.Spec)) runbox.Spec { s := baseSpec(); f(&s); return s }
	specs := map[string]runbox.Spec{
		"empty image":      withSpec(func(s *runbox.Spec) { s.Image = "" }),
		"unparsable image": withSpec(func(s *runbox.Spec) { s.Image = "Bad//Image::x" }),
		"unknown network":  withSpec(func(s *runbox.Spec) { s.Network = "runbox-no-such-net-" + runbox.NetworkPolicy(runID) }),
		"relative source":  withSpec(func(s *runbox.Spec) { s.Mounts = []runbox.Mount{{Source: "rel/dir", Target: "/x"}} }),
		"missing source":   withSpec(func(s *runbox.Spec) { s.Mounts = []runbox.Mount{{Source: "/no/such/dir", Target: "/x"}} }),
		"relative target":  withSpec(func(s *runbox.Spec) { s.Mounts = []runbox.Mount{{Source: dir, Target: "x"}} }),
		"duplicate targets": withSpec(func(s *runbox.Spec) {
			s.Mounts = []runbox.Mount{{Source: dir, Target: "/x"}, {Source: dir, Target: "/x/"}}
		}),
		"negative memory": withSpec(func(s *runbox.Spec) { s.Resources.MemoryBytes = -1 }),
		"negative cpus":   withSpec(func(s *runbox.Spec) { s.Resources.CPUs = -0.5 }),
		"negative pids":   withSpec(func(s *runbox.Spec) { s.Resources.Pids = -1 }),
		"env without =":   withSpec(func(s *runbox.Spec) { s.Env = []string{"NOEQUALS"} }),
		"NUL in process":  withSpec(func(s *runbox.Spec) { s.Process = []string{"sleep", "1\x00"} }),
		"empty process":   withSpec(func(s *runbox.Spec) { s.Process = []string{} }),
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			_, err := e.Open(context.Background(), spec)
			require.ErrorIs(t, err, runbox.ErrInvalidSpec)
		})
	}
	assert.Empty(t, containersOfRun(t, cli))

	s := open(t, e, baseSpec())
	cmds := map[string]runbox.Command{
		"empty args":    {},
		"empty program": {Args: []string{""}},
		"NUL in arg":    {Args: []string{"echo", "a\x00b"}},
		"NUL in env":    {Args: []string{"true"}, Env: []string{"A=b\x00"}},
		"env without =": {Args: []string{"true"}, Env: []string{"A"}},
		"empty env key": {Args: []string{"true"}, Env: []string{"=x"}},
	}
	for name, cmd := range cmds {
		t.Run(name, func(t *testing.T) {
			o := run(t, s, cmd)
			require.ErrorIs(t, o.err, runbox.ErrInvalidCommand)
		})
	}
	_, err := e.Run(context.Background(), runbox.Command{}, runbox.Streams{})
	assert.Error(t, err)
}

func TestSnapshot(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	mounted := t.TempDir()
	spec := baseSpec()
	spec.Mounts = []runbox.Mount{{Source: mounted, Target: "/mnt/host"}}
	s := open(t, e, spec)
	o := run(t, s, runbox.ShellCommand("mkdir /work && echo layer > /work/file && echo mount > /mnt/host/file"))
	require.NoError(t, o.err)
	require.Equal(t, 0, o.res.ExitCode)

	ref := "runbox-test/snap:" + runID
	img, err := s.Snapshot(context.Background(), runbox.SnapshotOptions{Reference: ref, Comment: "test"})
	require.NoError(t, err)
	removeImage(t, cli, img.ID)
	assert.True(t, strings.HasPrefix(img.ID, "sha256:"))
	assert.Equal(t, "linux", img.OS)

	ii, err := cli.ImageInspect(context.Background(), ref)
	require.NoError(t, err)
	assert.Equal(t, img.ID, ii.ID)
	labels := ii.Config.Labels
	assert.Empty(t, labels[docker.LabelKind], "a sweep for sessions must never select a snapshot")
	assert.Empty(t, labels[docker.LabelOwner])
	assert.Equal(t, runID, labels[labelRun], "the caller's labels stay")

	// A session from the snapshot sees the layer, not the mount.
	s2 := open(t, e, runbox.Spec{Image: ref, Process: sleeper, Labels: runLabels()})
	o = run(t, s2, runbox.ShellCommand("cat /work/file; ls /mnt/host"))
	require.NoError(t, o.err)
	assert.Equal(t, "layer\n", o.stdout)
	assert.Empty(t, strings.TrimSpace(o.stdout[len("layer\n"):]), "mounted contents are not in the snapshot")

	// The snapshot keeps the session's lifetime process as its command.
	s3 := open(t, e, runbox.Spec{Image: img.ID, Labels: runLabels()})
	o = run(t, s3, argv("cat", "/work/file"))
	require.NoError(t, o.err)
	assert.Equal(t, "layer\n", o.stdout)

	// Pausing is an explicit choice and works.
	img2, err := s.Snapshot(context.Background(), runbox.SnapshotOptions{Pause: true})
	require.NoError(t, err)
	removeImage(t, cli, img2.ID)
	c, err := cli.ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
	require.NoError(t, err)
	assert.False(t, c.Container.State.Paused)

	_, err = s.Snapshot(context.Background(), runbox.SnapshotOptions{Reference: "Bad//Ref"})
	assert.ErrorIs(t, err, runbox.ErrInvalidSpec)
}

func TestClose(t *testing.T) {
	e := newExecutor(t)
	cli := e.Client()
	s, err := e.Open(context.Background(), baseSpec())
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, s.Close(ctx), "Close works after its context was cancelled")
	require.NoError(t, s.Close(context.Background()), "Close is idempotent")
	_, err = cli.ContainerInspect(context.Background(), s.ID(), client.ContainerInspectOptions{})
	assert.True(t, cerrdefs.IsNotFound(err), "the container is gone: %v", err)

	_, err = s.Run(context.Background(), argv("true"), runbox.Streams{})
	assert.ErrorIs(t, err, runbox.ErrSessionClosed)
	_, err = s.Snapshot(context.Background(), runbox.SnapshotOptions{})
	assert.ErrorIs(t, err, runbox.ErrSessionClosed)
}

func TestCloseInterruptsRun(t *testing.T) {
	e := newExecutor(t)
	s, err := e.Open(context.Background(), baseSpec())
	require.NoError(t, err)
	var out syncBuffer
	errc := make(chan error, 1)
	go func() {
		_, err := s.Run(context.Background(), runbox.ShellCommand("echo started; sleep 1000"), runbox.Streams{Stdout: &out})
		errc <- err
	}()
	require.Eventually(t, func() bool { return out.String() != "" }, time.Minute, 10*time.Millisecond)
	require.NoError(t, s.Close(context.Background()))
	select {
	case err := <-errc:
		assert.ErrorIs(t, err, runbox.ErrSessionClosed)
	case <-time.After(time.Minute):
		require.FailNow(t, "Run did not return after Close")
	}
}

func TestConcurrentSessions(t *testing.T) {
	e := newExecutor(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				ctx := context.Background()
				s, err := e.Open(ctx, baseSpec())
				if err != nil {
					return err
				}
				defer s.Close(ctx)
				var out bytes.Buffer
				res, err := s.Run(ctx, argv("echo", fmt.Sprint(i)), runbox.Streams{Stdout: &out})
				if err != nil {
					return err
				}
				if res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", i) {
					return fmt.Errorf("session %d: %+v %q", i, res, out.String())
				}
				return s.Close(ctx)
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

func TestCallsOnOneSessionAreSerial(t *testing.T) {
	e := newExecutor(t)
	s := open(t, e, baseSpec())
	// Each command takes a lock directory and fails with 99 if it is
	// already taken: overlapping commands would show up as 99.
	script := "mkdir /tmp/lock || exit 99; sleep 0.05; rmdir /tmp/lock"
	var wg sync.WaitGroup
	results := make(chan output, 6)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- run(t, s, runbox.ShellCommand(script))
		}()
	}
	wg.Wait()
	close(results)
	for o := range results {
		require.NoError(t, o.err)
		assert.Equal(t, 0, o.res.ExitCode, o.stderr)
	}
}

func TestExecutorRun(t *testing.T) {
	e := newExecutor(t)
	_, err := e.Run(context.Background(), argv("true"), runbox.Streams{})
	require.ErrorIs(t, err, docker.ErrNoDefaultSpec)

	e = newExecutor(t, docker.WithDefaultSpec(baseSpec()))
	var out bytes.Buffer
	res, err := e.Run(context.Background(), runbox.ShellCommand("echo one-shot; exit 4"), runbox.Streams{Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 4, res.ExitCode)
	assert.Equal(t, "one-shot\n", out.String())
	assert.Empty(t, containersOfRun(t, e.Client()), "the one-shot session is closed")
}

func TestInspectImage(t *testing.T) {
	e := newExecutor(t)
	img, err := e.InspectImage(context.Background(), fixtureRef)
	require.NoError(t, err)
	assert.Equal(t, fixtureID, img.ID)
	assert.Equal(t, "linux", img.OS)
	assert.NotEmpty(t, img.Architecture)

	_, err = e.InspectImage(context.Background(), "runbox-test/absent:"+runID)
	require.ErrorIs(t, err, runbox.ErrImageUnavailable)

	_, err = e.InspectImage(context.Background(), "Bad//Ref")
	require.ErrorIs(t, err, runbox.ErrInvalidSpec)
}

func TestDeadEngineIsNotImageAbsent(t *testing.T) {
	dead := newExecutor(t, docker.WithHost("unix://"+filepath.Join(t.TempDir(), "no-engine.sock")))
	_, err := dead.InspectImage(context.Background(), fixtureRef)
	require.Error(t, err)
	assert.NotErrorIs(t, err, runbox.ErrImageUnavailable)
	assert.ErrorIs(t, err, runbox.ErrTransport)

	_, err = dead.PullImage(context.Background(), "example.invalid/x:1", runbox.PullOptions{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, runbox.ErrImageUnavailable)

	_, err = dead.Open(context.Background(), baseSpec())
	require.Error(t, err)
	assert.NotErrorIs(t, err, runbox.ErrImageUnavailable)
}
