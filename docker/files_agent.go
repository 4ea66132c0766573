package docker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/agent"
)

// With the agent, CopyOut, ReadFile, WriteFile of bytes (and CopyIn where
// the Engine's endpoint falls short) move files through the session's
// agent connection instead of the Engine's archive endpoint: the agent runs its own binary as `agent
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

// agentRead runs the agent's copy-out helper on src and hands the source's
// description and its tar stream to consume. A failure of the helper
// reaches consume as the stream's error, so the reading side's error comes
// first; the helper's own ending is the answer when consume read
// everything. When consume stops early, the helper is stopped.
func (s *Session) agentRead(ctx context.Context, op, src string, consume func(FileInfo, *bufio.Reader) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.agentFiles(ctx, op, src, []string{"copy-out", src}, nil, pw)
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- err
	}()
	err := func() error {
		br := bufio.NewReaderSize(pr, 256<<10)
		line, err := br.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("runbox/docker: %s %s: %w", op, src, err)
		}
		var st agent.FileStat
		if err := json.Unmarshal(line, &st); err != nil {
			return fmt.Errorf("runbox/docker: %s %s: the agent's description: %w", op, src, err)
		}
		return consume(FileInfo{Name: st.Name, Size: st.Size, Mode: st.Mode, ModTime: st.ModTime, LinkTarget: st.LinkTarget}, br)
	}()
	pr.CloseWithError(errCopyEnded)
	aerr := <-done
	switch {
	case errors.Is(err, ErrUnsafeArchive), errors.Is(err, runbox.ErrInvalidCommand), errors.Is(err, runbox.ErrOutputLimit):
		return err
	case err != nil:
		return s.copyErr(ctx, err)
	}
	return aerr
}

// copyOutAgent is CopyOut through the agent: the tar stream is extracted
// here with the same care as the Engine's.
func (s *Session) copyOutAgent(ctx context.Context, opts CopyOutOptions, dir, to string) (CopyOutResult, error) {
	var res CopyOutResult
	err := s.agentRead(ctx, "copy out", opts.Source, func(info FileInfo, r *bufio.Reader) error {
		res.Info = info
		if opts.Archive != nil {
			n, err := io.Copy(opts.Archive, r)
			res.Bytes = n
			return err
		}
		if err := s.extractOut(&res, opts, r, dir, to); err != nil {
			return err
		}
		// What follows the archive's end (padding) is not the copy's.
		_, err := io.Copy(io.Discard, r)
		return err
	})
	return res, err
}

// readFileAgent is ReadFile through the agent, with the Engine path's
// rules: a final symbolic link is followed once (to the absolute path it
// names in the session), the file must be regular and at most limit
// bytes.
func (s *Session) readFileAgent(ctx context.Context, opts ReadFileOptions, limit int64) (ReadFileResult, error) {
	p := opts.Path
	for range 2 { // the path, then what its symbolic link resolves to
		var res ReadFileResult
		next := ""
		err := s.agentRead(ctx, "read file", p, func(info FileInfo, r *bufio.Reader) error {
			switch {
			case info.Mode&fs.ModeSymlink != 0 && info.LinkTarget != "" && p == opts.Path:
				next = info.LinkTarget
				_, err := io.Copy(io.Discard, r)
				return err
			case !info.Mode.IsRegular():
				return fmt.Errorf("%w: read file %s: not a regular file (%s)", runbox.ErrInvalidCommand, opts.Path, info.Mode.Type())
			case info.Size > limit:
				return fmt.Errorf("%w: read file %s: %d bytes, more than %d", runbox.ErrOutputLimit, opts.Path, info.Size, limit)
			}
			tr := tar.NewReader(r)
			hdr, err := tr.Next()
			if err != nil {
				return fmt.Errorf("runbox/docker: read file %s: %w", opts.Path, err)
			}
			if hdr.Typeflag != tar.TypeReg {
				return fmt.Errorf("%w: read file %s: not a regular file", runbox.ErrInvalidCommand, opts.Path)
			}
			data, err := io.ReadAll(io.LimitReader(tr, limit+1))
			if err != nil {
				return fmt.Errorf("runbox/docker: read file %s: %w", opts.Path, err)
			}
			if int64(len(data)) > limit {
				return fmt.Errorf("%w: read file %s: more than %d bytes", runbox.ErrOutputLimit, opts.Path, limit)
			}
			info.Size = int64(len(data))
			res = ReadFileResult{Data: data, Info: info}
			_, err = io.Copy(io.Discard, r)
			return err
		})
		if err != nil {
			return ReadFileResult{}, err
		}
		if next == "" {
			return res, nil
		}
		p = next
	}
	return ReadFileResult{}, fmt.Errorf("%w: read file %s: a symbolic link to a symbolic link", runbox.ErrInvalidCommand, opts.Path)
}

// writeFileAgent is WriteFile of bytes through the agent's copy-in helper
// in its "exact" mode: Path itself is written, never a file inside a
// directory of that name.
func (s *Session) writeFileAgent(ctx context.Context, opts WriteFileOptions, hdr *tar.Header) (WriteFileResult, error) {
	hdr.Name = "."
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(hdr); err != nil {
		return WriteFileResult{}, err
	}
	if _, err := tw.Write(opts.Data); err != nil {
		return WriteFileResult{}, err
	}
	if err := tw.Close(); err != nil {
		return WriteFileResult{}, err
	}
	if err := s.agentFiles(ctx, "write file", opts.Path, []string{"copy-in", opts.Path, path.Base(opts.Path), "exact"}, &buf, nil); err != nil {
		return WriteFileResult{}, err
	}
	return WriteFileResult{Bytes: int64(len(opts.Data))}, nil
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
