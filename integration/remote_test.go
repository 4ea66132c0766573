//go:build linux

package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
	"github.com/runbox-dev/runbox/internal/testimage"
)

// EnvRemoteEngines names the file scripts/remote-engines writes: where the
// second Engine listens (TLS, its socket, through ssh) and its material.
// CI sets it; with CI=true the remote suite fails without it.
const EnvRemoteEngines = "RUNBOX_REMOTE_ENGINES"

// remoteEngines is what scripts/remote-engines started.
type remoteEngines struct {
	tcp        string // tcp://127.0.0.1:2376, TLS with client certificates
	certs      string // ca.pem, cert.pem, key.pem (and wrong-ca.pem)
	socket     string // the same Engine's unix socket
	ssh        string // the same Engine as ssh://user@127.0.0.1:PORT/socket
	sshPath    string // a directory with an ssh that uses the generated keys
	engineOnly string // a directory whose contents only the Engine sees
}

var (
	remoteOnce sync.Once
	remoteEnv  remoteEngines
	remoteErr  error
)

// needRemote returns the second Engine, importing the fixture image into
// it once. It fails under CI=true when there is none, and skips otherwise.
func needRemote(t testing.TB) remoteEngines {
	t.Helper()
	needEngine(t)
	remoteOnce.Do(func() {
		path := os.Getenv(EnvRemoteEngines)
		if path == "" {
			remoteErr = fmt.Errorf("$%s is not set (scripts/remote-engines start DIR writes DIR/env)", EnvRemoteEngines)
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			remoteErr = err
			return
		}
		vars := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				vars[k] = v
			}
		}
		remoteEnv = remoteEngines{
			tcp: vars["RUNBOX_REMOTE_TCP"], certs: vars["RUNBOX_REMOTE_CERTS"], socket: vars["RUNBOX_REMOTE_SOCKET"],
			ssh: vars["RUNBOX_REMOTE_SSH"], sshPath: vars["RUNBOX_REMOTE_SSH_PATH"], engineOnly: vars["RUNBOX_REMOTE_ENGINE_ONLY"],
		}
		cli, err := client.New(client.WithHost(remoteEnv.socket))
		if err != nil {
			remoteErr = err
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := testimage.Import(ctx, cli, fixtureRef, runLabels()); err != nil {
			remoteErr = fmt.Errorf("the second Engine (%s): importing the fixture: %w", remoteEnv.socket, err)
			return
		}
	})
	if remoteErr != nil {
		if os.Getenv("CI") == "true" {
			require.NoError(t, remoteErr, "remote suite")
		}
		t.Skip("remote suite:", remoteErr)
	}
	return remoteEnv
}

// sweepRemote removes what this run left on the second Engine and fails
// the test when sessions survived it.
func sweepRemote(t testing.TB, r remoteEngines) {
	cli, err := client.New(client.WithHost(r.socket))
	require.NoError(t, err)
	defer cli.Close()
	leaks := sweep(cli)
	remoteOnce = sync.Once{} // the fixture went with the sweep
	assert.Empty(t, leaks, "objects survived the remote suite on the second Engine")
}

// createTLSContext creates the docker context name in the docker
// configuration cfg, for the second Engine over TLS.
func createTLSContext(t *testing.T, cfg, name string, r remoteEngines) {
	t.Helper()
	dockerCLI(t, "--config", cfg, "context", "create", name, "--docker",
		fmt.Sprintf("host=%s,ca=%s/ca.pem,cert=%s/cert.pem,key=%s/key.pem", r.tcp, r.certs, r.certs, r.certs))
}

// clearEngineEnv leaves only what a route sets: no DOCKER_HOST, context or
// TLS variable of the developer's, and an empty docker configuration.
func clearEngineEnv(t testing.TB) string {
	for _, k := range []string{docker.EnvHost, docker.EnvContext, docker.EnvTLSVerify, docker.EnvTLS, docker.EnvCertPath} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	cfg := t.TempDir()
	t.Setenv(docker.EnvConfig, cfg)
	return cfg
}

// dockerCLI runs the docker CLI, which the context route uses exactly as a
// user would.
func dockerCLI(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	require.NoError(t, err, "docker %s: %s", strings.Join(args, " "), out)
}

// remoteRoute reaches the second Engine one way and says how it expects
// the Executor to name it.
type remoteRoute struct {
	name    string
	setup   func(t *testing.T, r remoteEngines) []docker.Option
	host    func(r remoteEngines) string
	context string
}

var remoteRoutes = []remoteRoute{
	{
		name: "tls-env",
		setup: func(t *testing.T, r remoteEngines) []docker.Option {
			clearEngineEnv(t)
			t.Setenv(docker.EnvHost, r.tcp)
			t.Setenv(docker.EnvTLSVerify, "1")
			t.Setenv(docker.EnvCertPath, r.certs)
			return nil
		},
		host:    func(r remoteEngines) string { return r.tcp },
		context: docker.DefaultContext,
	},
	{
		name: "context",
		setup: func(t *testing.T, r remoteEngines) []docker.Option {
			cfg := clearEngineEnv(t)
			dockerCLI(t, "--config", cfg, "context", "create", "rbx-d2", "--docker",
				fmt.Sprintf("host=%s,ca=%s/ca.pem,cert=%s/cert.pem,key=%s/key.pem", r.tcp, r.certs, r.certs, r.certs))
			dockerCLI(t, "--config", cfg, "context", "use", "rbx-d2")
			return nil
		},
		host:    func(r remoteEngines) string { return r.tcp },
		context: "rbx-d2",
	},
	{
		name: "ssh",
		setup: func(t *testing.T, r remoteEngines) []docker.Option {
			clearEngineEnv(t)
			t.Setenv("PATH", r.sshPath+string(os.PathListSeparator)+os.Getenv("PATH"))
			return []docker.Option{docker.WithHost(r.ssh)}
		},
		host:    func(r remoteEngines) string { return r.ssh },
		context: docker.DefaultContext,
	},
}

// TestRemoteEngines runs the remote suite against the second Engine
// through TLS chosen by DOCKER_HOST and the TLS variables, through a docker
// context made with `docker context create` and chosen by `docker context
// use`, and through ssh://.
func TestRemoteEngines(t *testing.T) {
	r := needRemote(t)
	t.Cleanup(func() { sweepRemote(t, r) })
	for _, route := range remoteRoutes {
		t.Run(route.name, func(t *testing.T) {
			opts := route.setup(t, r)
			testRemoteSuite(t, r, route, opts)
		})
	}
}

func testRemoteSuite(t *testing.T, r remoteEngines, route remoteRoute, opts []docker.Option) {
	bin := runboxBinary(t)
	newRemote := func(t *testing.T) *docker.Executor {
		return newExecutor(t, append([]docker.Option{docker.WithAgent(bin), docker.WithAgentRequired()}, opts...)...)
	}
	e := newRemote(t)
	ctx := context.Background()

	t.Run("engine", func(t *testing.T) {
		info, err := e.Engine(ctx)
		require.NoError(t, err)
		assert.Equal(t, route.host(r), info.Endpoint.Host)
		assert.Equal(t, route.context, info.Endpoint.Context)
		assert.False(t, info.Local, "a TCP or ssh Engine is remote")
		assert.NotEmpty(t, info.ServerVersion)
		assert.NotEmpty(t, info.APIVersion)
		assert.Equal(t, strings.HasPrefix(route.host(r), "tcp://"), info.Endpoint.TLS)
		assert.False(t, info.Endpoint.SkipTLSVerify)
	})

	name := "rbx-remote-" + route.name + "-" + runID
	spec := baseSpec()
	spec.Init = false // the agent is PID 1
	spec.Name = name
	s := open(t, e, spec)
	require.True(t, s.Agent())
	assert.Equal(t, docker.AgentAuthKey, s.AgentAuth(), "a remote session's agent is reached with its key")

	t.Run("run", func(t *testing.T) {
		o := run(t, s, runbox.ShellCommand("echo out; echo err >&2; exit 7"))
		require.NoError(t, o.err)
		assert.Equal(t, runbox.Result{ExitCode: 7}, o.res)
		assert.Equal(t, "out\n", o.stdout)
		assert.Equal(t, "err\n", o.stderr)
	})

	t.Run("stdin", func(t *testing.T) {
		var out strings.Builder
		res, err := s.Run(ctx, runbox.Command{Args: []string{"cat"}, Stdin: strings.NewReader("through the remote Engine\n")}, runbox.Streams{Stdout: &out})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "through the remote Engine\n", out.String())
	})

	t.Run("stream", func(t *testing.T) {
		converse(t, ctx, s, runbox.ShellCommand("echo ready; read x; echo got $x"))
	})

	t.Run("cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cancelled once the command has shown it runs.
		out := writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
		_, err := s.Run(cctx, runbox.ShellCommand("echo started; exec sleep 1000"), runbox.Streams{Stdout: out})
		require.ErrorIs(t, err, runbox.ErrCancelled)
		o := run(t, s, argv("true"))
		require.NoError(t, o.err, "the session outlives a cancelled command")
	})

	t.Run("snapshot", func(t *testing.T) {
		require.NoError(t, run(t, s, runbox.ShellCommand("echo kept > /kept")).err)
		img, err := s.Snapshot(ctx, runbox.SnapshotOptions{Labels: runLabels()})
		require.NoError(t, err)
		t.Cleanup(func() { removeImage(t, e.Client(), img.ID) })
		snap := baseSpec()
		snap.Image = img.ID
		snap.Init = false
		s2 := open(t, e, snap)
		o := run(t, s2, argv("cat", "/kept"))
		require.NoError(t, o.err)
		assert.Equal(t, "kept\n", o.stdout)
	})

	t.Run("reattach by name", func(t *testing.T) {
		other := newRemote(t)
		s2, err := other.Session(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, s.ID(), s2.ID())
		o := run(t, s2, argv("echo", "again"))
		require.NoError(t, o.err)
		assert.Equal(t, "again\n", o.stdout)
	})

	t.Run("pull from a local registry", func(t *testing.T) {
		ref := testRegistry(t) + "/runbox-test/bb:single"
		img, err := e.PullImage(ctx, ref, runbox.PullOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { removeImage(t, e.Client(), ref) })
		assert.NotEmpty(t, img.ID)
		s2 := open(t, e, runbox.Spec{Image: ref, Process: sleeper, Labels: runLabels()})
		o := run(t, s2, argv("echo", "pulled"))
		require.NoError(t, o.err)
		assert.Equal(t, "pulled\n", o.stdout)
	})

	t.Run("mount source on the Engine's host only", func(t *testing.T) {
		src := filepath.Join(r.engineOnly, "data")
		_, err := os.Stat(src)
		require.ErrorIs(t, err, os.ErrNotExist, "the test needs a path this process does not see")
		spec := baseSpec()
		spec.Mounts = []runbox.Mount{{Source: src, Target: "/data", ReadOnly: true}}
		s2 := open(t, e, spec)
		o := run(t, s2, argv("cat", "/data/hello"))
		require.NoError(t, o.err)
		assert.Equal(t, "on the Engine host\n", o.stdout)
	})

	t.Run("mount source on this machine only", func(t *testing.T) {
		src := filepath.Join(r.engineOnly, "local-only-"+route.name)
		require.NoError(t, os.MkdirAll(src, 0o755))
		t.Cleanup(func() { os.RemoveAll(src) })
		spec := baseSpec()
		spec.Mounts = []runbox.Mount{{Source: src, Target: "/data"}}
		_, err := e.Open(ctx, spec)
		require.ErrorIs(t, err, runbox.ErrInvalidSpec)
		assert.ErrorContains(t, err, "is remote")
		assert.Empty(t, containersOfRemoteRun(t, r), "a refused spec leaves nothing")
	})

	t.Run("close", func(t *testing.T) {
		s2, err := e.OpenSession(ctx, baseSpec())
		require.NoError(t, err)
		require.NoError(t, s2.Close(ctx))
		_, err = e.Session(ctx, s2.ID())
		require.ErrorIs(t, err, runbox.ErrSessionNotFound)
	})
}

// containersOfRemoteRun lists this run's containers on the second Engine
// other than the named sessions the suite keeps open.
func containersOfRemoteRun(t *testing.T, r remoteEngines) []string {
	cli, err := client.New(client.WithHost(r.socket))
	require.NoError(t, err)
	defer cli.Close()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", labelRun+"="+runID).Add("status", "created"),
	})
	require.NoError(t, err)
	var ids []string
	for _, c := range res.Items {
		ids = append(ids, c.ID[:12])
	}
	return ids
}

// converse starts cmd, which prints "ready", reads a line x and prints
// "got x", and holds that conversation with it: its output must arrive
// while it still runs, and its input reach it.
func converse(t *testing.T, ctx context.Context, st runbox.Starter, cmd runbox.Command) {
	t.Helper()
	p, err := st.Start(ctx, cmd)
	require.NoError(t, err)
	defer p.Close(ctx)
	lines := bufio.NewReader(p.Stdout())
	first, err := lines.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "ready\n", first, "output arrives while the process still runs")
	_, err = io.WriteString(p.Stdin(), "it\n")
	require.NoError(t, err)
	require.NoError(t, p.Stdin().Close())
	rest, err := io.ReadAll(lines)
	require.NoError(t, err)
	assert.Equal(t, "got it\n", string(rest))
	res, err := p.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// The reproductions that are about how the Engine is chosen and
// reached, as a user meets them with the CLI.
func TestRemoteEngineChoiceCLI(t *testing.T) {
	r := needRemote(t)
	t.Cleanup(func() { sweepRemote(t, r) })
	bin := runboxBinary(t)
	cfg := clearEngineEnv(t)
	createTLSContext(t, cfg, "ux-d2", r)
	name := "rbx-ctx-" + runID
	cli := func(env []string, args ...string) cliResult {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		return runCmd(t, cmd)
	}
	ctxEnv := []string{docker.EnvContext + "=ux-d2"}

	res := cli(ctxEnv, "open", "--name", name, "--label", labelRun+"="+runID, fixtureRef, "--", "sleep", "1000000")
	require.Equal(t, 0, res.code, res.stderr)
	defer cli(ctxEnv, "close", name)

	t.Run("DOCKER_CONTEXT chooses the Engine of runbox ls", func(t *testing.T) {
		res := cli(ctxEnv, "ls")
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stdout, name)
		local := cli(nil, "ls")
		require.Equal(t, 0, local.code, local.stderr)
		assert.NotContains(t, local.stdout, name, "without the context, the local Engine's sessions")
		flag := cli(nil, "--context", "ux-d2", "ls")
		require.Equal(t, 0, flag.code, flag.stderr)
		assert.Contains(t, flag.stdout, name)
	})
	t.Run("docker context use chooses the Engine of runbox exec", func(t *testing.T) {
		dockerCLI(t, "--config", cfg, "context", "use", "ux-d2")
		defer dockerCLI(t, "--config", cfg, "context", "use", "default")
		res := cli(nil, "exec", name, "--", "true")
		assert.Equal(t, 0, res.code, res.stderr)
		res = cli(nil, "version")
		assert.Contains(t, res.stdout, r.tcp)
		assert.Contains(t, res.stdout, "ux-d2")
		// DOCKER_HOST overrides the current context, as for docker.
		res = cli([]string{docker.EnvHost + "=unix:///var/run/docker.sock"}, "exec", name, "--", "true")
		assert.NotEqual(t, 0, res.code)
		assert.Contains(t, res.stderr, "not found")
	})
	t.Run("the Engine's refusals name it", func(t *testing.T) {
		res := cli(ctxEnv, "exec", "nosuch-"+runID, "--", "true")
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, "session not found")
		assert.Contains(t, res.stderr, r.tcp+" (context ux-d2)")
		res = cli(ctxEnv, "run", "--pull", "never", "runbox-test/absent:"+runID, "--", "true")
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, "is not on the Engine "+r.tcp+" (context ux-d2)")
		res = cli(ctxEnv, "image", "pull", "127.0.0.1:1/runbox-test/absent:"+runID)
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, r.tcp+" (context ux-d2)")
		// Any other refusal too: a name the Engine already has.
		res = cli(ctxEnv, "open", "--name", name, "--label", labelRun+"="+runID, fixtureRef, "--", "sleep", "1000000")
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, r.tcp+" (context ux-d2)")
	})
	t.Run("ssh:// is supported", func(t *testing.T) {
		res := cli([]string{"PATH=" + r.sshPath + string(os.PathListSeparator) + os.Getenv("PATH")}, "-H", r.ssh, "exec", name, "--", "echo", "over ssh")
		assert.Equal(t, 0, res.code, res.stderr)
		assert.Equal(t, "over ssh\n", res.stdout)
	})
	t.Run("an unreachable ssh Engine is named and not a DNS failure", func(t *testing.T) {
		res := cli([]string{"PATH=" + r.sshPath + string(os.PathListSeparator) + os.Getenv("PATH")}, "-H", "ssh://root@127.0.0.1:1", "ls")
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, "ssh://root@127.0.0.1:1")
		assert.NotContains(t, res.stderr, "no such host")
	})
}

// The TLS variables, as docker reads them, never weaker.
func TestRemoteEngineTLSEnv(t *testing.T) {
	r := needRemote(t)
	ctx := context.Background()
	engine := func(t *testing.T) (docker.EngineInfo, error) {
		e, err := docker.New()
		require.NoError(t, err)
		defer e.Close()
		return e.Engine(ctx)
	}
	copyCerts := func(t *testing.T, dir, ca string) {
		for src, dst := range map[string]string{ca: "ca.pem", "cert.pem": "cert.pem", "key.pem": "key.pem"} {
			b, err := os.ReadFile(filepath.Join(r.certs, src))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, dst), b, 0o600))
		}
	}

	t.Run("DOCKER_TLS_VERIFY without DOCKER_CERT_PATH uses the docker config directory", func(t *testing.T) {
		cfg := clearEngineEnv(t)
		copyCerts(t, cfg, "ca.pem")
		t.Setenv(docker.EnvHost, r.tcp)
		t.Setenv(docker.EnvTLSVerify, "1")
		info, err := engine(t)
		require.NoError(t, err, "verified TLS with the certificates of the config directory")
		assert.True(t, info.Endpoint.TLS)
		assert.False(t, info.Endpoint.SkipTLSVerify)
	})
	t.Run("DOCKER_CERT_PATH alone never connects without verification", func(t *testing.T) {
		clearEngineEnv(t)
		certs := t.TempDir()
		copyCerts(t, certs, "wrong-ca.pem") // unverified TLS would accept the Engine anyway
		t.Setenv(docker.EnvHost, r.tcp)
		t.Setenv(docker.EnvCertPath, certs)
		_, err := engine(t)
		require.Error(t, err)
	})
	t.Run("a wrong CA is a TLS failure that names the Engine", func(t *testing.T) {
		clearEngineEnv(t)
		certs := t.TempDir()
		copyCerts(t, certs, "wrong-ca.pem")
		t.Setenv(docker.EnvHost, r.tcp)
		t.Setenv(docker.EnvTLSVerify, "1")
		t.Setenv(docker.EnvCertPath, certs)
		_, err := engine(t)
		require.ErrorIs(t, err, docker.ErrEngineTLS)
		require.ErrorIs(t, err, runbox.ErrTransport)
		assert.ErrorContains(t, err, "127.0.0.1:2376")
		assert.NotContains(t, err.Error(), "%2F")
		assert.NotContains(t, strings.ToLower(err.Error()), "running?")

		res := runCmd(t, exec.Command(runboxBinary(t), "ls"))
		assert.Equal(t, 125, res.code)
		assert.Contains(t, res.stderr, "127.0.0.1:2376")
		assert.NotContains(t, strings.ToLower(res.stderr), "running?")
		assert.NotContains(t, res.stderr, "%2F")
	})
	t.Run("a context's TLS material is used, not the variables", func(t *testing.T) {
		cfg := clearEngineEnv(t)
		dockerCLI(t, "--config", cfg, "context", "create", "tlsctx", "--docker",
			fmt.Sprintf("host=%s,ca=%s/ca.pem,cert=%s/cert.pem,key=%s/key.pem", r.tcp, r.certs, r.certs, r.certs))
		t.Setenv(docker.EnvContext, "tlsctx")
		info, err := engine(t)
		require.NoError(t, err)
		assert.Equal(t, "tlsctx", info.Endpoint.Context)
		assert.Equal(t, docker.EnvContext, info.Endpoint.Source)
	})
}

// A caller in a container with the host's Docker socket mounted: the
// Engine does not see the caller's files, so the session must get a copy
// of the agent instead of a bind of the caller's path (which the Engine
// would look for on its own host). The remote suite runs from there
// through the CLI: open, run, stdin, stream, cancel, snapshot, reattach
// by name, pull from a local registry, a mount source only the Engine's
// host has, close.
func TestCallerInContainerWithHostSocket(t *testing.T) {
	needEngine(t)
	bin := runboxBinary(t)
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Init = false // the agent is PID 1, so the CLI in it can be signalled
	spec.Mounts = []runbox.Mount{
		{Source: "/var/run/docker.sock", Target: "/var/run/docker.sock"},
		{Source: filepath.Dir(bin), Target: "/opt/rb", ReadOnly: true},
	}
	spec.Env = []string{"HOME=/tmp", "PATH=/bin"}
	caller := open(t, e, spec)
	name := "rbx-in-container-" + runID
	rbArgs := func(args ...string) []string { return append([]string{"/opt/rb/" + filepath.Base(bin)}, args...) }
	rb := func(args ...string) output {
		return run(t, caller, argv(rbArgs(args...)...))
	}
	ok := func(t *testing.T, o output) {
		t.Helper()
		require.NoError(t, o.err)
		require.Equal(t, 0, o.res.ExitCode, o.stderr)
	}
	o := rb("open", "--name", name, "--label", labelRun+"="+runID, fixtureRef, "--", "sleep", "1000000")
	ok(t, o)
	defer func() {
		o := rb("close", name)
		assert.Equal(t, 0, o.res.ExitCode, "close: %s", o.stderr)
	}()
	o = rb("exec", name, "--", "echo", "from inside")
	ok(t, o)
	assert.Equal(t, "from inside\n", o.stdout)

	o = rb("version")
	assert.Contains(t, o.stdout, "remote", "the Engine does not share the caller's filesystem")

	// The session has the agent, delivered by copy and reached by key.
	info, err := e.Find(context.Background(), name)
	require.NoError(t, err)
	s, err := e.Session(context.Background(), info.ID)
	require.NoError(t, err)
	assert.Equal(t, docker.AgentAuthKey, s.AgentAuth())

	t.Run("run", func(t *testing.T) {
		o := rb("run", "--label", labelRun+"="+runID, fixtureRef, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
		require.NoError(t, o.err)
		assert.Equal(t, 7, o.res.ExitCode, o.stderr)
		assert.Equal(t, "out\n", o.stdout)
		assert.Equal(t, "err\n", o.stderr)
	})
	t.Run("stdin", func(t *testing.T) {
		o := run(t, caller, runbox.Command{Args: rbArgs("exec", "-i", name, "--", "cat"), Stdin: strings.NewReader("through the socket\n")})
		ok(t, o)
		assert.Equal(t, "through the socket\n", o.stdout)
	})
	t.Run("stream", func(t *testing.T) {
		ctx := fctx(t)
		converse(t, ctx, caller, runbox.Command{Args: rbArgs("exec", "-i", name, "--", "sh", "-c", "echo ready; read x; echo got $x")})
	})
	t.Run("cancel", func(t *testing.T) {
		ctx := fctx(t)
		p, err := caller.Start(ctx, runbox.Command{Args: rbArgs("exec", name, "--", "sh", "-c", "echo started; exec sleep 1001")})
		require.NoError(t, err)
		defer p.Close(ctx)
		line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "started\n", line)
		require.NoError(t, p.Signal(runbox.ProcessSignalInterrupt), "Ctrl-C to the CLI")
		res, err := p.Wait(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, 0, res.ExitCode)
		top, err := e.Client().ContainerTop(ctx, info.ID, client.ContainerTopOptions{})
		require.NoError(t, err)
		for _, proc := range top.Processes {
			assert.NotContains(t, proc[len(proc)-1], "sleep 1001", "the interrupted command was killed in the session")
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		ok(t, rb("exec", name, "--", "sh", "-c", "echo kept > /kept"))
		tag := "runbox-test/in-container:" + runID
		o := rb("snapshot", "--tag", tag, name)
		ok(t, o)
		t.Cleanup(func() { removeImage(t, e.Client(), tag) })
		o = rb("run", "--label", labelRun+"="+runID, "--pull", "never", tag, "--", "cat", "/kept")
		ok(t, o)
		assert.Equal(t, "kept\n", o.stdout)
	})
	t.Run("pull from a local registry", func(t *testing.T) {
		ref := testRegistry(t) + "/runbox-test/bb:single"
		ok(t, rb("image", "pull", ref))
		t.Cleanup(func() { removeImage(t, e.Client(), ref) })
		o := rb("run", "--label", labelRun+"="+runID, "--pull", "never", ref, "--", "echo", "pulled")
		ok(t, o)
		assert.Equal(t, "pulled\n", o.stdout)
	})
	t.Run("mount source on the Engine's host only", func(t *testing.T) {
		src := t.TempDir() // on this machine, which is the Engine's host; not in the caller's container
		require.NoError(t, os.WriteFile(filepath.Join(src, "hello"), []byte("on the Engine host\n"), 0o644))
		o := rb("run", "--label", labelRun+"="+runID, "-v", src+":/data:ro", fixtureRef, "--", "cat", "/data/hello")
		ok(t, o)
		assert.Equal(t, "on the Engine host\n", o.stdout)
	})
}

// One program holds sessions on two Engines at once (one Executor each),
// and `runbox ls --all-contexts` lists them together; an Engine that does
// not answer is named and the others are still listed.
func TestRemoteAllContexts(t *testing.T) {
	r := needRemote(t)
	t.Cleanup(func() { sweepRemote(t, r) })
	bin := runboxBinary(t)
	cfg := clearEngineEnv(t)
	createTLSContext(t, cfg, "rbx-all", r)
	ctx := context.Background()

	local := newExecutor(t)
	remote := newExecutor(t, docker.WithContext("rbx-all"), docker.WithAgent(bin), docker.WithAgentRequired())
	localName, remoteName := "rbx-all-local-"+runID, "rbx-all-remote-"+runID
	spec := baseSpec()
	spec.Name = localName
	ls := open(t, local, spec)
	spec = baseSpec()
	spec.Init = false
	spec.Name = remoteName
	rs := open(t, remote, spec)

	var wg sync.WaitGroup
	outs := make([]output, 2)
	for i, s := range []runbox.Session{ls, rs} {
		wg.Go(func() { outs[i] = run(t, s, runbox.ShellCommand("cat /etc/hostname")) })
	}
	wg.Wait()
	for i, o := range outs {
		require.NoError(t, o.err)
		assert.Equal(t, []runbox.Session{ls, rs}[i].ID()[:12]+"\n", o.stdout)
	}
	_, err := local.Find(ctx, remoteName)
	assert.ErrorIs(t, err, runbox.ErrSessionNotFound, "each Executor sees its own Engine's sessions")
	_, err = remote.Find(ctx, localName)
	assert.ErrorIs(t, err, runbox.ErrSessionNotFound)

	res := runCmd(t, exec.Command(bin, "ls", "--all-contexts"))
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `(?m)^CONTEXT\s+ID\s+NAME`, res.stdout)
	assert.Regexp(t, `(?m)^default\s+`+ls.ID()[:12]+`\s+`+localName+`\s`, res.stdout)
	assert.Regexp(t, `(?m)^rbx-all\s+`+rs.ID()[:12]+`\s+`+remoteName+`\s`, res.stdout)

	res = runCmd(t, exec.Command(bin, "ls", "--all-contexts", "--format", "{{.Context}} {{.Name}}"))
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "default "+localName+"\n")
	assert.Contains(t, res.stdout, "rbx-all "+remoteName+"\n")
	res = runCmd(t, exec.Command(bin, "ls", "--all-contexts", "--json"))
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `"name":"`+remoteName+`","image":`)
	assert.Contains(t, res.stdout, `"context":"rbx-all"`)

	dockerCLI(t, "--config", cfg, "context", "create", "rbx-dead", "--docker", "host=tcp://127.0.0.1:1")
	res = runCmd(t, exec.Command(bin, "ls", "--all-contexts"))
	assert.Equal(t, 125, res.code)
	assert.Contains(t, res.stderr, "context rbx-dead")
	assert.Contains(t, res.stderr, "tcp://127.0.0.1:1")
	assert.Contains(t, res.stdout, localName, "the Engines that answer are still listed")
	assert.Contains(t, res.stdout, remoteName)

	res = runCmd(t, exec.Command(bin, "--context", "rbx-all", "ls", "--all-contexts"))
	assert.Equal(t, 125, res.code)
	assert.Contains(t, res.stderr, "cannot be combined")
}
