package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// With the agent, CopyOut (and CopyIn where the Engine's endpoint falls
// short) moves trees through the session's agent connection instead of
// the Engine's archive endpoint: the agent runs its own binary as `agent
// copy-out` or `agent copy-in`, a command like any other, with the tar
// stream on its stdout or stdin. Reading a tree that way is about twice
// as fast as the Engine's endpoint; writing one is slower (files created
// from inside the session cost more than the Engine's own extraction), so
// CopyIn uses the agent only in sessions with a tmpfs or a read-only
// root, where the Engine's endpoint writes beneath the tmpfs (the session
// never sees the files) or refuses outright. docs/docker.md, "Files", has
// the numbers. The helper does nothing and says so (errUseEngine) when it
// is not root with root's file privileges in the session (a non-root
// image user, dropped capabilities), and the copy then goes through the
// Engine, which is not bound by them; so does a copy when the agent
// cannot be reached (a session whose lifetime process ended).

// errUseEngine says that the agent did not do the copy and the Engine's
// archive endpoint should.
var errUseEngine = errors.New("runbox/docker: copy through the Engine")

// agentFiles runs one file helper of the agent with stdin and stdout and
// classifies how it ended.
func (s *Session) agentFiles(ctx context.Context, op, p string, args []string, stdin io.Reader, stdout io.Writer) error {
	if s.plan == nil {
		return errUseEngine
	}
	conn, err := s.agentConn(ctx)
	if err != nil {
		return errUseEngine
	}
	var stderr strings.Builder
	req := agent.StartRequest{Args: append([]string{agentInPath, "agent"}, args...), CleanEnv: true, Dir: "/"}
	ex, err := conn.Run(ctx, req, agent.RunOptions{Stdin: stdin, Stdout: stdout, Stderr: &limitedBuilder{b: &stderr, n: 4096}})
	var se *agent.StartError
	switch {
	case err == nil:
	case errors.As(err, &se):
		return errUseEngine
	case ctx.Err() != nil:
		return cancelled(ctx, op)
	case errors.Is(err, agent.ErrConnectionLost):
		return s.lostOrTransport(ctx, err)
	default:
		return fmt.Errorf("runbox/docker: %s %s: %w", op, p, err)
	}
	msg := strings.TrimSpace(stderr.String())
	switch {
	case ex.Signal != "":
		return fmt.Errorf("runbox/docker: %s %s: the agent's copy ended by %s", op, p, ex.Signal)
	case ex.Code == agent.FilesOK:
		return nil
	case ex.Code == agent.FilesUseEngine:
		return errUseEngine
	case ex.Code == agent.FilesNotFound:
		return fmt.Errorf("runbox/docker: %w", &fs.PathError{Op: op, Path: p, Err: fs.ErrNotExist})
	case ex.Code == agent.FilesInvalid:
		return fmt.Errorf("%w: %s: %s", runbox.ErrInvalidCommand, op, msg)
	}
	return fmt.Errorf("runbox/docker: %s %s: %s", op, p, msg)
}

// limitedBuilder keeps the first n bytes written to it.
type limitedBuilder struct {
	b *strings.Builder
	n int
}

func (w *limitedBuilder) Write(p []byte) (int, error) {
	if room := w.n - w.b.Len(); room > 0 {
		w.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// copyInAgent is CopyIn of a host path through the agent: the tree is
// sent relative to itself, and the helper places it as docker cp would.
func (s *Session) copyInAgent(ctx context.Context, opts CopyInOptions, fi fs.FileInfo, contents bool) (CopyInResult, error) {
	if sec := s.spec.Security; !sec.ReadOnlyRootfs && len(sec.Tmpfs) == 0 {
		return CopyInResult{}, errUseEngine
	}
	name, kind := filepath.Base(opts.Source), "file"
	if contents {
		name = "."
	}
	if fi.IsDir() {
		kind = "dir"
	}
	pr, pw := io.Pipe()
	var res CopyInResult
	done := make(chan error, 1)
	go func() {
		err := writeTree(pw, opts.Source, ".", opts.PreserveOwnership, &res)
		pw.CloseWithError(err)
		done <- err
	}()
	err := s.agentFiles(ctx, "copy in", opts.Dest, []string{"copy-in", opts.Dest, name, kind}, pr, nil)
	pr.CloseWithError(errCopyEnded)
	werr := <-done
	if err != nil {
		return CopyInResult{}, err
	}
	if werr != nil {
		return CopyInResult{}, fmt.Errorf("runbox/docker: copy in: %w", werr)
	}
	return res, nil
}

// copyOutAgent is CopyOut through the agent: the helper's first line
// describes the source, the rest is its tar stream, extracted here with
// the same care as the Engine's.
func (s *Session) copyOutAgent(ctx context.Context, opts CopyOutOptions, dir, to string) (CopyOutResult, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.agentFiles(ctx, "copy out", opts.Source, []string{"copy-out", opts.Source}, nil, pw)
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- err
	}()
	// A failure of the helper reaches the reader as the pipe's error, so
	// the reading side's error comes first; the helper's own ending is
	// the answer when everything was read.
	finish := func(res CopyOutResult, err error) (CopyOutResult, error) {
		pr.CloseWithError(errCopyEnded)
		aerr := <-done
		switch {
		case errors.Is(err, ErrUnsafeArchive), errors.Is(err, runbox.ErrInvalidCommand):
			return res, err
		case err != nil:
			return res, s.copyErr(ctx, err)
		}
		return res, aerr
	}
	br := bufio.NewReaderSize(pr, 256<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return finish(CopyOutResult{}, fmt.Errorf("runbox/docker: copy out %s: %w", opts.Source, err))
	}
	var st agent.FileStat
	if err := json.Unmarshal(line, &st); err != nil {
		return finish(CopyOutResult{}, fmt.Errorf("runbox/docker: copy out %s: the agent's description: %w", opts.Source, err))
	}
	res := CopyOutResult{Info: FileInfo{Name: st.Name, Size: st.Size, Mode: st.Mode, ModTime: st.ModTime, LinkTarget: st.LinkTarget}}
	if opts.Archive != nil {
		n, err := io.Copy(opts.Archive, br)
		res.Bytes = n
		return finish(res, err)
	}
	err = s.extractOut(&res, opts, br, dir, to)
	if err == nil {
		// What follows the archive's end (padding) is not the copy's.
		_, err = io.Copy(io.Discard, br)
	}
	return finish(res, err)
}

// extractOut extracts the archive of a copy-out under dir, the source
// (described by res.Info) arriving as to ("": its own name).
func (s *Session) extractOut(res *CopyOutResult, opts CopyOutOptions, r io.Reader, dir, to string) error {
	from := res.Info.Name
	if from == "" || from == "/" {
		from = "."
	}
	if to == "" {
		to = from
	} else if res.Info.Mode.IsDir() {
		if fi, err := os.Stat(opts.Dest); err == nil && !fi.IsDir() {
			return fmt.Errorf("%w: copy out: cannot copy directory %s onto the file %s", runbox.ErrInvalidCommand, opts.Source, opts.Dest)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("runbox/docker: copy out: %w", err)
	}
	defer root.Close()
	x := &extraction{root: root, from: from, to: to, chown: opts.PreserveOwnership, res: res}
	return x.extract(r)
}
