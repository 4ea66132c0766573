//go:build linux

package integration

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

func fileSession(t *testing.T) *docker.Session {
	t.Helper()
	return open(t, newExecutor(t, docker.WithoutAgent()), baseSpec())
}

func agentFileSession(t testing.TB, spec runbox.Spec) *docker.Session {
	t.Helper()
	spec.Init = false // the agent is PID 1
	s := open(t, agentExecutor(t), spec)
	require.True(t, s.Agent())
	return s
}

// agentCopyInSpec is a spec whose sessions copy trees in through the
// agent too: CopyIn uses the agent only in sessions with a tmpfs or a
// read-only root.
func agentCopyInSpec() runbox.Spec {
	spec := baseSpec()
	spec.Security.Tmpfs = []runbox.Tmpfs{{Target: "/mnt/scratch"}}
	return spec
}

// forFileBackends runs a files test on a session without the agent (the
// Engine's archive endpoint), on one with it (copies out through the
// agent) and on one that also copies in through the agent.
func forFileBackends(t *testing.T, test func(t *testing.T, s *docker.Session)) {
	t.Run("engine", func(t *testing.T) { test(t, fileSession(t)) })
	t.Run("agent", func(t *testing.T) { test(t, agentFileSession(t, baseSpec())) })
	t.Run("agent both ways", func(t *testing.T) { test(t, agentFileSession(t, agentCopyInSpec())) })
}

func sh(t *testing.T, s runbox.Session, script string) string {
	t.Helper()
	o := run(t, s, runbox.ShellCommand(script))
	require.NoError(t, o.err)
	require.Equal(t, 0, o.res.ExitCode, o.stderr)
	return o.stdout
}

func fctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A tree goes in and comes back out with its modes, owners, symbolic
// links and empty directories.
func TestFilesRoundTrip(t *testing.T) {
	forFileBackends(t, func(t *testing.T, s *docker.Session) {
		ctx := fctx(t)
		src := filepath.Join(t.TempDir(), "tree")
		require.NoError(t, os.MkdirAll(filepath.Join(src, "sub", "empty"), 0o750))
		require.NoError(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o600))
		require.NoError(t, os.Symlink("sub/data", filepath.Join(src, "link")))
		require.NoError(t, os.Chown(filepath.Join(src, "sub", "data"), 1234, 5678))

		res, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/tmp", PreserveOwnership: true})
		require.NoError(t, err)
		assert.Equal(t, 6, res.Entries)
		got := sh(t, s, "cd /tmp/tree && stat -c '%n %a %u:%g %F' run.sh sub sub/empty sub/data link && readlink link && ./run.sh")
		assert.Equal(t, "run.sh 755 0:0 regular file\nsub 750 0:0 directory\nsub/empty 750 0:0 directory\n"+
			"sub/data 600 1234:5678 regular file\nlink 777 0:0 symbolic link\nsub/data\nhi\n", got)

		// Without PreserveOwnership everything belongs to root; into a new name.
		_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/renamed"})
		require.NoError(t, err)
		assert.Equal(t, "0:0\n", sh(t, s, "stat -c %u:%g /renamed/sub/data"))

		dest := t.TempDir()
		out, err := s.CopyOut(ctx, docker.CopyOutOptions{Source: "/tmp/tree", Dest: dest, PreserveOwnership: true})
		require.NoError(t, err)
		assert.Equal(t, "tree", out.Info.Name)
		assert.True(t, out.Info.Mode.IsDir())
		assert.Equal(t, 2, out.Files)
		assert.Equal(t, 3, out.Dirs)
		assert.Equal(t, 1, out.Symlinks)
		back := filepath.Join(dest, "tree")
		for name, mode := range map[string]fs.FileMode{"run.sh": 0o755, "sub": fs.ModeDir | 0o750, "sub/empty": fs.ModeDir | 0o750, "sub/data": 0o600, "link": fs.ModeSymlink | 0o777} {
			fi, err := os.Lstat(filepath.Join(back, name))
			require.NoError(t, err, name)
			assert.Equal(t, mode, fi.Mode(), name)
		}
		link, err := os.Readlink(filepath.Join(back, "link"))
		require.NoError(t, err)
		assert.Equal(t, "sub/data", link)
		b, err := os.ReadFile(filepath.Join(back, "sub", "data"))
		require.NoError(t, err)
		assert.Equal(t, "data", string(b))
		fi, err := os.Lstat(filepath.Join(back, "sub", "data"))
		require.NoError(t, err)
		assert.Equal(t, "1234:5678", ownerOf(fi))

		// The contents of a directory ("/."), to a new host name.
		_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/tmp/tree/sub/.", Dest: filepath.Join(dest, "contents")})
		require.NoError(t, err)
		b, err = os.ReadFile(filepath.Join(dest, "contents", "data"))
		require.NoError(t, err)
		assert.Equal(t, "data", string(b))

		// The archive itself.
		var archive bytes.Buffer
		out, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/tmp/tree/run.sh", Archive: &archive})
		require.NoError(t, err)
		assert.Equal(t, int64(archive.Len()), out.Bytes)
		_, err = s.CopyIn(ctx, docker.CopyInOptions{Archive: &archive, Dest: "/root"})
		require.NoError(t, err)
		assert.Equal(t, "hi\n", sh(t, s, "/root/run.sh"))
	})
}

// A hostile session prepares symbolic links that would lead a naive copy
// out of the destination; nothing outside it is written, and the links
// arrive as links.
func TestFilesCopyOutHostileSymlinks(t *testing.T) {
	forFileBackends(t, func(t *testing.T, s *docker.Session) {
		ctx := fctx(t)
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		require.NoError(t, os.MkdirAll(outside, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644))
		sh(t, s, `mkdir -p /out/d && cd /out && ln -s /etc evil && ln -s ../../.. up && ln -s `+outside+` host &&
		ln -s `+filepath.Join(outside, "secret")+` secret && echo pwned > d/passwd && mkfifo fifo && mknod null c 1 3`)

		dest := filepath.Join(base, "dest")
		require.NoError(t, os.Mkdir(dest, 0o755))
		res, err := s.CopyOut(ctx, docker.CopyOutOptions{Source: "/out", Dest: dest})
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"out/fifo", "out/null"}, res.Skipped)
		for link, target := range map[string]string{"evil": "/etc", "up": "../../..", "host": outside, "secret": filepath.Join(outside, "secret")} {
			got, err := os.Readlink(filepath.Join(dest, "out", link))
			require.NoError(t, err, link)
			assert.Equal(t, target, got)
		}
		// Copy again over the links: files replace them, nothing goes through.
		sh(t, s, `rm /out/secret && echo pwned > /out/secret && rm /out/host && mkdir /out/host && echo pwned > /out/host/x`)
		_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/out", Dest: dest})
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(outside, "secret"))
		require.NoError(t, err)
		assert.Equal(t, "secret", string(b))
		_, err = os.Lstat(filepath.Join(outside, "x"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
		fi, err := os.Lstat(filepath.Join(dest, "out", "host"))
		require.NoError(t, err)
		assert.True(t, fi.IsDir(), "the host's symlink was replaced by the directory, not followed")

		// A symbolic link as the source arrives as a link.
		_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/out/evil", Dest: filepath.Join(base, "single")})
		require.NoError(t, err)
		got, err := os.Readlink(filepath.Join(base, "single"))
		require.NoError(t, err)
		assert.Equal(t, "/etc", got)
		ents, err := os.ReadDir(outside)
		require.NoError(t, err)
		assert.Len(t, ents, 1, "nothing was created outside the destination")
		if os.Getuid() == 0 {
			b, err := os.ReadFile("/etc/passwd")
			require.NoError(t, err)
			assert.NotContains(t, string(b), "pwned")
		}
	})
}

func TestFilesReadWrite(t *testing.T) {
	forFileBackends(t, func(t *testing.T, s *docker.Session) {
		ctx := fctx(t)
		_, err := s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/task.txt", Data: []byte("do it\n"), Mode: 0o640, UID: 65534, GID: 65534})
		require.NoError(t, err)
		assert.Equal(t, "640 65534:65534 do it\n", sh(t, s, "stat -c '%a %u:%g ' /tmp/task.txt | tr -d '\\n'; cat /tmp/task.txt"))

		big := strings.Repeat("x", 3<<20)
		w, err := s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/big", Content: strings.NewReader(big), Size: int64(len(big))})
		require.NoError(t, err)
		assert.Equal(t, int64(len(big)), w.Bytes)
		r, err := s.ReadFile(ctx, docker.ReadFileOptions{Path: "/tmp/big"})
		require.NoError(t, err)
		assert.Equal(t, big, string(r.Data))
		assert.Equal(t, fs.FileMode(0o644), r.Info.Mode)

		_, err = s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/short", Content: strings.NewReader("abc"), Size: 10})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand)

		sh(t, s, "ln -s /tmp/task.txt /link && mkdir /dir")
		r, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/link"})
		require.NoError(t, err, "symbolic links are followed inside the session")
		assert.Equal(t, "do it\n", string(r.Data))
		sh(t, s, "ln -s link /chain && ln -s /dir /dirlink")
		r, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/chain"})
		require.NoError(t, err, "a chain of links, resolved as the Engine resolves it")
		assert.Equal(t, "do it\n", string(r.Data))
		r, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/dirlink/../tmp/task.txt"})
		require.NoError(t, err)
		assert.Equal(t, "do it\n", string(r.Data))

		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/tmp/big", MaxSize: 1024})
		assert.ErrorIs(t, err, runbox.ErrOutputLimit)
		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/dir"})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
		// A FIFO is never opened for reading (that would wait for a writer).
		sh(t, s, "mkfifo /fifo && ln -s /fifo /fifolink")
		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/fifo"})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand)
		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/fifolink"})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand)

		// Missing paths are "not found", never a daemon failure.
		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/no/such/file"})
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = s.WriteFile(ctx, docker.WriteFileOptions{Path: "/no/such/dir/f", Data: []byte("x")})
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/no/such", Dest: t.TempDir()})
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: t.TempDir(), Dest: "/no/such/dir/x"})
		assert.ErrorIs(t, err, fs.ErrNotExist)
		_, err = s.Stat(ctx, docker.StatOptions{Path: "/nope"})
		assert.ErrorIs(t, err, fs.ErrNotExist)
		st, err := s.Stat(ctx, docker.StatOptions{Path: "/link"})
		require.NoError(t, err)
		assert.Equal(t, "/tmp/task.txt", st.Info.LinkTarget)

		// A directory is not replaced by a file.
		_, err = s.WriteFile(ctx, docker.WriteFileOptions{Path: "/dir", Data: []byte("x")})
		assert.ErrorIs(t, err, runbox.ErrInvalidCommand)

		// Bad paths are refused before the Engine is asked.
		for _, p := range []string{"", "relative", "/a\x00b"} {
			_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: p})
			assert.ErrorIs(t, err, runbox.ErrInvalidCommand, p)
		}

		require.NoError(t, s.Close(ctx))
		_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/tmp/task.txt"})
		assert.ErrorIs(t, err, runbox.ErrSessionClosed)
		_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: t.TempDir(), Dest: "/tmp"})
		assert.ErrorIs(t, err, runbox.ErrSessionClosed)
	})
}

// A session removed behind the caller's back is "ended", not "not found".
func TestFilesSessionGone(t *testing.T) {
	e := newExecutor(t, docker.WithoutAgent())
	s := open(t, e, baseSpec())
	ctx := fctx(t)
	_, err := e.Client().ContainerRemove(ctx, s.ID(), client.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)
	_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/etc/passwd"})
	assert.ErrorIs(t, err, runbox.ErrSessionEnded)
	assert.NotErrorIs(t, err, fs.ErrNotExist)
}

func ownerOf(fi fs.FileInfo) string {
	st := fi.Sys().(*syscall.Stat_t)
	return strconv.Itoa(int(st.Uid)) + ":" + strconv.Itoa(int(st.Gid))
}

// benchTree makes a host tree of n files of size bytes each.
func benchTree(b *testing.B, n, size int) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "tree")
	require.NoError(b, os.MkdirAll(dir, 0o755))
	data := bytes.Repeat([]byte("r"), size)
	for i := range n {
		require.NoError(b, os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(i)), data, 0o644))
	}
	return dir
}

// benchCopy measures CopyIn and CopyOut of one tree in an agent session
// ("runbox", through the agent) against `docker cp` into the same session
// and against runbox's copy through the Engine's archive endpoint in a
// session without the agent ("engine"), in the same run.
func benchCopy(b *testing.B, n, size int) {
	s := agentFileSession(b, baseSpec())
	plain := open(b, newExecutor(b, docker.WithoutAgent()), baseSpec())
	src := benchTree(b, n, size)
	ctx := context.Background()
	dockerCp := func(b *testing.B, args ...string) {
		out, err := exec.Command("docker", append([]string{"cp"}, args...)...).CombinedOutput()
		require.NoError(b, err, string(out))
	}
	copyIn := func(s *docker.Session) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(int64(n * size))
			for b.Loop() {
				_, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/tmp"})
				require.NoError(b, err)
			}
		}
	}
	copyOut := func(s *docker.Session) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(int64(n * size))
			dest := b.TempDir()
			for b.Loop() {
				_, err := s.CopyOut(ctx, docker.CopyOutOptions{Source: "/tmp/tree", Dest: dest})
				require.NoError(b, err)
			}
		}
	}
	b.Run("In/runbox", copyIn(s))
	b.Run("In/engine", copyIn(plain))
	b.Run("In/docker-cp", func(b *testing.B) {
		b.SetBytes(int64(n * size))
		for b.Loop() {
			dockerCp(b, src, s.ID()+":/tmp")
		}
	})
	b.Run("Out/runbox", copyOut(s))
	b.Run("Out/engine", copyOut(plain))
	b.Run("Out/docker-cp", func(b *testing.B) {
		b.SetBytes(int64(n * size))
		dest := b.TempDir()
		for b.Loop() {
			dockerCp(b, s.ID()+":/tmp/tree", dest)
		}
	})
}

func BenchmarkCopy100MiB(b *testing.B)    { benchCopy(b, 100, 1<<20) }
func BenchmarkCopy1000Files(b *testing.B) { benchCopy(b, 1000, 1024) }

// With the agent, trees travel through the agent's connection and are
// written and read by a process in the session, which sees the session's
// own mounts: a tmpfs, where the Engine's archive endpoint writes beneath
// the mount (invisible to the session) and refuses a read-only root
// outright.
func TestFilesThroughAgent(t *testing.T) {
	ctx := fctx(t)
	src := filepath.Join(t.TempDir(), "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o640))

	for name, ro := range map[string]bool{"tmpfs": false, "read-only root": true} {
		t.Run(name, func(t *testing.T) {
			spec := baseSpec()
			spec.Security.Tmpfs = []runbox.Tmpfs{{Target: "/work"}}
			spec.Security.ReadOnlyRootfs = ro
			s := agentFileSession(t, spec)
			res, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/work"})
			require.NoError(t, err)
			assert.Equal(t, 3, res.Entries)
			assert.Equal(t, "640 data\n", sh(t, s, "stat -c '%a ' /work/tree/sub/data | tr -d '\\n'; cat /work/tree/sub/data; echo"))

			sh(t, s, "echo made > /work/made")
			dest := t.TempDir()
			out, err := s.CopyOut(ctx, docker.CopyOutOptions{Source: "/work/made", Dest: dest})
			require.NoError(t, err)
			assert.Equal(t, "made", out.Info.Name)
			assert.Equal(t, int64(5), out.Info.Size)
			b, err := os.ReadFile(filepath.Join(dest, "made"))
			require.NoError(t, err)
			assert.Equal(t, "made\n", string(b))

			_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/work/nothing", Dest: dest})
			assert.ErrorIs(t, err, fs.ErrNotExist)
			_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/work/no/such"})
			assert.ErrorIs(t, err, fs.ErrNotExist)
			_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/work/made"})
			assert.ErrorIs(t, err, runbox.ErrInvalidCommand, "a directory onto a file")
		})
	}

	// Where the agent lacks root's file privileges (a non-root user, a
	// dropped capability), the Engine copies, unbound by them.
	for name, mod := range map[string]func(*runbox.Spec){
		"non-root user":    func(s *runbox.Spec) { s.User = "65534" },
		"CHOWN dropped":    func(s *runbox.Spec) { s.Security.CapDrop = []string{"CHOWN"} },
		"all caps dropped": func(s *runbox.Spec) { s.Security.CapDrop = []string{"ALL"} },
	} {
		t.Run(name, func(t *testing.T) {
			spec := agentCopyInSpec()
			mod(&spec)
			s := agentFileSession(t, spec)
			require.NoError(t, os.Chown(filepath.Join(src, "sub", "data"), 1234, 5678))
			_, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/root", PreserveOwnership: true})
			require.NoError(t, err)
			dest := t.TempDir()
			_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/root/tree/sub/data", Dest: dest})
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(dest, "data"))
			require.NoError(t, err)
			assert.Equal(t, "data", string(b))
			st, err := s.Stat(ctx, docker.StatOptions{Path: "/root/tree/sub/data"})
			require.NoError(t, err)
			assert.Equal(t, fs.FileMode(0o640), st.Info.Mode)
		})
	}
}

// A hostile session prepares links where a copy-in will land; the agent's
// copy replaces them and never writes through them.
func TestFilesCopyInThroughAgentHostileLinks(t *testing.T) {
	ctx := fctx(t)
	spec := baseSpec()
	spec.Security.Tmpfs = []runbox.Tmpfs{{Target: "/dst"}}
	s := agentFileSession(t, spec)
	sh(t, s, `mkdir -p /dst/real /victim && echo orig > /victim/data && ln -s /victim /dst/tree &&
		ln -s /victim /dst/real/sub && ln -s /victim/data /dst/real/file`)
	src := filepath.Join(t.TempDir(), "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "sub", "data"), []byte("pwned\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "file"), []byte("pwned\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "data"), []byte("pwned\n"), 0o644))

	_, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/dst"})
	require.NoError(t, err)
	_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: src + "/.", Dest: "/dst/real"})
	require.NoError(t, err)
	assert.Equal(t, "data\norig\n", sh(t, s, "ls /victim; cat /victim/data"))
	assert.Equal(t, "directory\ndirectory\nregular file\n", sh(t, s, "stat -c %F /dst/tree /dst/real/sub /dst/real/file"))
	assert.Equal(t, "pwned\npwned\n", sh(t, s, "cat /dst/tree/sub/data /dst/real/sub/data"))
}

// A session removed behind the caller's back is "ended" with the agent too.
func TestFilesSessionGoneWithAgent(t *testing.T) {
	e := agentExecutor(t)
	spec := baseSpec()
	spec.Init = false
	s := open(t, e, spec)
	ctx := fctx(t)
	_, err := e.Client().ContainerRemove(ctx, s.ID(), client.ContainerRemoveOptions{Force: true})
	require.NoError(t, err)
	_, err = s.CopyOut(ctx, docker.CopyOutOptions{Source: "/etc/passwd", Dest: t.TempDir()})
	assert.ErrorIs(t, err, runbox.ErrSessionEnded)
	_, err = s.CopyIn(ctx, docker.CopyInOptions{Source: t.TempDir(), Dest: "/tmp"})
	assert.ErrorIs(t, err, runbox.ErrSessionEnded)
	_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/etc/passwd"})
	assert.ErrorIs(t, err, runbox.ErrSessionEnded)
	_, err = s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/x", Data: []byte("x")})
	assert.ErrorIs(t, err, runbox.ErrSessionEnded)
}

// Under gVisor the agent's copy runs on gVisor's kernel: the same calls,
// the same results.
func TestFilesThroughAgentGVisor(t *testing.T) {
	e := agentExecutor(t)
	needRuntime(t, e, gvisor)
	ctx := fctx(t)
	spec := gvisorSpec()
	spec.Security.Tmpfs = []runbox.Tmpfs{{Target: "/work"}}
	s := open(t, e, spec)
	src := filepath.Join(t.TempDir(), "tree")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "sub"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(src, "sub", "data"), []byte("data"), 0o640))
	_, err := s.CopyIn(ctx, docker.CopyInOptions{Source: src, Dest: "/work"})
	require.NoError(t, err)
	assert.Equal(t, "750 640 data", sh(t, s, "stat -c '%a ' /work/tree/sub /work/tree/sub/data | tr -d '\\n'; cat /work/tree/sub/data"))
	sh(t, s, "ln -s /etc /work/tree/evil")
	dest := t.TempDir()
	res, err := s.CopyOut(ctx, docker.CopyOutOptions{Source: "/work/tree", Dest: dest})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Files)
	assert.Equal(t, 1, res.Symlinks)
	b, err := os.ReadFile(filepath.Join(dest, "tree", "sub", "data"))
	require.NoError(t, err)
	assert.Equal(t, "data", string(b))
	link, err := os.Readlink(filepath.Join(dest, "tree", "evil"))
	require.NoError(t, err)
	assert.Equal(t, "/etc", link)
}

// BenchmarkSmallFile reads and writes one small file in an agent session
// ("runbox", through the agent) and in a session without it ("engine",
// the Engine's archive endpoint), in the same run.
func BenchmarkSmallFile(b *testing.B) {
	ctx := context.Background()
	sessions := map[string]*docker.Session{
		"runbox": agentFileSession(b, baseSpec()),
		"engine": open(b, newExecutor(b, docker.WithoutAgent()), baseSpec()),
	}
	for _, op := range []string{"Read", "Write"} {
		for _, variant := range []string{"runbox", "engine"} {
			s := sessions[variant]
			b.Run(op+"/"+variant, func(b *testing.B) {
				_, err := s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/small", Data: []byte("hello\n")})
				require.NoError(b, err)
				for b.Loop() {
					if op == "Read" {
						_, err = s.ReadFile(ctx, docker.ReadFileOptions{Path: "/tmp/small"})
					} else {
						_, err = s.WriteFile(ctx, docker.WriteFileOptions{Path: "/tmp/small", Data: []byte("hello\n")})
					}
					require.NoError(b, err)
				}
			})
		}
	}
}
