package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/runbox-dev/runbox"
)

// DefaultReadFileLimit is the largest file ReadFile returns when
// ReadFileOptions.MaxSize is zero.
const DefaultReadFileLimit = 64 << 20

// FileInfo describes a path in a session as the Engine's archive endpoint
// reports it.
type FileInfo struct {
	Name       string      // the last element of the path
	Size       int64       // in bytes
	Mode       fs.FileMode // type and permission bits
	ModTime    time.Time   // last modification
	LinkTarget string      // for a symbolic link: the absolute path it resolves to in the session
}

func fileInfo(st container.PathStat) FileInfo {
	return FileInfo{Name: st.Name, Size: st.Size, Mode: st.Mode, ModTime: st.Mtime, LinkTarget: st.LinkTarget}
}

// StatOptions holds the options of Session.Stat.
type StatOptions struct {
	Path string // absolute path in the session; a final symbolic link is not followed
}

// StatResult is what Session.Stat reports.
type StatResult struct {
	Info FileInfo
}

// CopyInOptions holds the options of Session.CopyIn. Exactly one of Source
// and Archive is set.
type CopyInOptions struct {
	// Source is a host file, directory or symbolic link (copied as a link,
	// not followed). A directory is copied with its whole tree; ending it
	// in "/." copies what the directory holds rather than the directory.
	Source string
	// Archive is a tar stream, extracted as it is into Dest, which must be
	// an existing directory (as `docker cp - ID:DEST` does).
	Archive io.Reader
	// Dest is an absolute path in the session. As with docker cp: an
	// existing directory receives Source under its own name; otherwise
	// Source is copied to Dest itself, whose parent must exist.
	Dest string
	// PreserveOwnership keeps the host files' owners (numeric); by default
	// everything copied belongs to root (0:0). Modes, modification times,
	// symbolic links and empty directories are always kept.
	PreserveOwnership bool
}

// CopyInResult is what Session.CopyIn reports.
type CopyInResult struct {
	Entries int   // tar entries sent (files, directories, links); 0 for Archive
	Bytes   int64 // bytes of file content sent; 0 for Archive
}

// CopyOutOptions holds the options of Session.CopyOut. Exactly one of Dest
// and Archive is set.
type CopyOutOptions struct {
	// Source is an absolute path in the session. A final symbolic link is
	// copied as a link; ending a directory in "/." copies what it holds.
	Source string
	// Dest is a host path. As with docker cp: an existing directory
	// receives Source under its own name; otherwise Source is copied to
	// Dest itself, whose parent must exist. Nothing is ever written outside
	// it (see docs/docker.md, "Files").
	Dest string
	// Archive receives the Engine's tar stream unchanged instead (as
	// `docker cp ID:SRC -` does). Its contents come from the session and
	// are not checked: whoever extracts it must treat it as hostile.
	Archive io.Writer
	// PreserveOwnership applies the session's numeric owners on the host
	// (which needs privilege); by default files belong to the caller.
	PreserveOwnership bool
}

// CopyOutResult is what Session.CopyOut reports.
type CopyOutResult struct {
	Info     FileInfo // the source, as the Engine reported it
	Files    int      // regular files and hard links written
	Dirs     int      // directories created or updated
	Symlinks int      // symbolic links created (never followed)
	Bytes    int64    // file content written (with Archive: archive bytes)
	Skipped  []string // archive names not copied: device nodes, FIFOs, other special files
}

// ReadFileOptions holds the options of Session.ReadFile.
type ReadFileOptions struct {
	Path    string // absolute path in the session; symbolic links are followed inside the session
	MaxSize int64  // larger files fail with runbox.ErrOutputLimit; 0: DefaultReadFileLimit
}

// ReadFileResult is what Session.ReadFile returns.
type ReadFileResult struct {
	Data []byte
	Info FileInfo // the regular file that was read
}

// WriteFileOptions holds the options of Session.WriteFile. The content is
// Data, or, when Content is set, exactly Size bytes read from Content.
type WriteFileOptions struct {
	Path    string      // absolute path in the session; its directory must exist
	Data    []byte      // the content, unless Content is set
	Content io.Reader   // read to exactly Size bytes
	Size    int64       // with Content: its length
	Mode    fs.FileMode // permission bits (and setuid, setgid, sticky); 0: 0644
	UID     int         // owner in the session (numeric); default root
	GID     int         // group in the session (numeric); default root
}

// WriteFileResult is what Session.WriteFile reports.
type WriteFileResult struct {
	Bytes int64 // bytes written
}

// sessionPath checks a path in the session.
func sessionPath(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: %s: empty path", runbox.ErrInvalidCommand, what)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%w: %s: path %q contains NUL", runbox.ErrInvalidCommand, what, p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %s: path %q in the session must be absolute", runbox.ErrInvalidCommand, what, p)
	}
	return nil
}

// fileErr classifies an Engine error of a file call: a closed or removed
// session, a path that does not exist (fs.ErrNotExist), a refused request
// (runbox.ErrInvalidCommand), a transport failure; anything else is the
// Engine's answer as it is.
func (s *Session) fileErr(ctx context.Context, op, p string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %s %s: %w", runbox.ErrSessionClosed, op, p, err)
	}
	if ctx.Err() != nil {
		return cancelled(ctx, op)
	}
	switch {
	case cerrdefs.IsNotFound(err):
		// The Engine says "not found" both for a missing path and for a
		// missing container: ask which.
		if _, ierr := s.e.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{}); ierr != nil {
			if cerrdefs.IsNotFound(ierr) {
				return fmt.Errorf("%w: container %s no longer exists", runbox.ErrSessionEnded, shortID(s.id))
			}
			return fmt.Errorf("runbox/docker: %s %s: %w", op, p, s.e.engineErr(ierr))
		}
		return fmt.Errorf("runbox/docker: %w", &fs.PathError{Op: op, Path: p, Err: fs.ErrNotExist})
	case cerrdefs.IsInvalidArgument(err), cerrdefs.IsConflict(err):
		return fmt.Errorf("%w: %s %s: %w", runbox.ErrInvalidCommand, op, p, err)
	}
	return fmt.Errorf("runbox/docker: %s %s: %w", op, p, s.e.engineErr(err))
}

func (s *Session) fileCall(ctx context.Context) error {
	if s.closed.Load() {
		return runbox.ErrSessionClosed
	}
	if ctx.Err() != nil {
		return cancelled(ctx, "")
	}
	return nil
}

// Stat describes a path in the session. A missing path is an error
// wrapping fs.ErrNotExist.
func (s *Session) Stat(ctx context.Context, opts StatOptions) (StatResult, error) {
	if err := sessionPath("stat", opts.Path); err != nil {
		return StatResult{}, err
	}
	if err := s.fileCall(ctx); err != nil {
		return StatResult{}, err
	}
	res, err := s.e.cli.ContainerStatPath(ctx, s.id, client.ContainerStatPathOptions{Path: opts.Path})
	if err != nil {
		return StatResult{}, s.fileErr(ctx, "stat", opts.Path, err)
	}
	return StatResult{Info: fileInfo(res.Stat)}, nil
}

// CopyIn copies a host file or tree (or a tar stream) into the session
// through the Engine's archive endpoint (or, in an agent session with a
// tmpfs or a read-only root, through the agent: see docs/docker.md,
// "Files"), keeping modes, modification times, symbolic links and empty
// directories. A missing destination
// directory is an error wrapping fs.ErrNotExist.
func (s *Session) CopyIn(ctx context.Context, opts CopyInOptions) (CopyInResult, error) {
	if (opts.Source == "") == (opts.Archive == nil) {
		return CopyInResult{}, fmt.Errorf("%w: copy in: set exactly one of Source and Archive", runbox.ErrInvalidCommand)
	}
	if err := sessionPath("copy in", opts.Dest); err != nil {
		return CopyInResult{}, err
	}
	if err := s.fileCall(ctx); err != nil {
		return CopyInResult{}, err
	}
	if opts.Archive != nil {
		if _, err := s.e.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: opts.Dest, Content: opts.Archive}); err != nil {
			return CopyInResult{}, s.fileErr(ctx, "copy in", opts.Dest, err)
		}
		return CopyInResult{}, nil
	}
	src := opts.Source
	contents := strings.HasSuffix(filepath.ToSlash(src), "/.")
	fi, err := os.Lstat(src)
	if err != nil {
		return CopyInResult{}, fmt.Errorf("runbox/docker: copy in: %w", err)
	}
	if contents && !fi.IsDir() {
		return CopyInResult{}, fmt.Errorf("%w: copy in: %s is not a directory", runbox.ErrInvalidCommand, src)
	}
	if res, err := s.copyInAgent(ctx, opts, fi, contents); !errors.Is(err, errUseEngine) {
		return res, err
	}
	// Where the tree goes: into an existing directory under its own name,
	// or to Dest itself.
	dir, name := opts.Dest, filepath.Base(src)
	if contents {
		name = "."
	}
	st, err := s.e.cli.ContainerStatPath(ctx, s.id, client.ContainerStatPathOptions{Path: opts.Dest})
	if err == nil && st.Stat.Mode&fs.ModeSymlink != 0 && st.Stat.LinkTarget != "" {
		st, err = s.e.cli.ContainerStatPath(ctx, s.id, client.ContainerStatPathOptions{Path: st.Stat.LinkTarget})
	}
	switch {
	case err == nil && st.Stat.Mode.IsDir():
	case err == nil && fi.IsDir():
		return CopyInResult{}, fmt.Errorf("%w: copy in: cannot copy directory %s onto the file %s", runbox.ErrInvalidCommand, src, opts.Dest)
	case err == nil || cerrdefs.IsNotFound(err):
		if err != nil && strings.HasSuffix(opts.Dest, "/") {
			return CopyInResult{}, s.fileErr(ctx, "copy in", opts.Dest, err)
		}
		dir, name = path.Dir(opts.Dest), path.Base(opts.Dest)
	default:
		return CopyInResult{}, s.fileErr(ctx, "copy in", opts.Dest, err)
	}
	pr, pw := io.Pipe()
	var res CopyInResult
	done := make(chan error, 1)
	go func() {
		err := writeTree(pw, src, name, opts.PreserveOwnership, &res)
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = s.e.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: dir, Content: pr})
	pr.CloseWithError(errCopyEnded)
	if werr := <-done; werr != nil && !errors.Is(werr, errCopyEnded) {
		return CopyInResult{}, fmt.Errorf("runbox/docker: copy in: %w", werr)
	}
	if err != nil {
		return CopyInResult{}, s.fileErr(ctx, "copy in", dir, err)
	}
	return res, nil
}

var errCopyEnded = errors.New("runbox/docker: the Engine ended the copy")

// writeTree writes src as a tar stream whose top entry is called name.
func writeTree(w io.Writer, src, name string, owners bool, res *CopyInResult) error {
	tw := tar.NewWriter(w)
	root := filepath.Clean(src)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil // a socket cannot be archived
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		hdr.Name = path.Join(name, filepath.ToSlash(rel))
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if !owners {
			hdr.Uid, hdr.Gid = 0, 0
		}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		res.Entries++
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		res.Bytes += n
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// CopyOut copies a path of the session to the host, or its tar stream to
// opts.Archive, through the agent when the session has one, else through
// the Engine's archive endpoint. Nothing is written outside Dest: names that are absolute,
// contain "..", pass through a symbolic link or hard-link outside the
// copy fail with ErrUnsafeArchive; symbolic links are created, never
// followed; existing files are replaced, never written through; device
// nodes and FIFOs are skipped (CopyOutResult.Skipped); set-user-ID and
// set-group-ID bits are dropped. A missing source is an error wrapping
// fs.ErrNotExist.
func (s *Session) CopyOut(ctx context.Context, opts CopyOutOptions) (CopyOutResult, error) {
	if (opts.Dest == "") == (opts.Archive == nil) {
		return CopyOutResult{}, fmt.Errorf("%w: copy out: set exactly one of Dest and Archive", runbox.ErrInvalidCommand)
	}
	if err := sessionPath("copy out", opts.Source); err != nil {
		return CopyOutResult{}, err
	}
	if err := s.fileCall(ctx); err != nil {
		return CopyOutResult{}, err
	}
	// The host side first, so that a bad destination costs no transfer.
	var dir, to string
	if opts.Dest != "" {
		fi, err := os.Stat(opts.Dest)
		switch {
		case err == nil && fi.IsDir():
			dir = opts.Dest
		case err == nil || errors.Is(err, fs.ErrNotExist):
			if err != nil && (strings.HasSuffix(opts.Dest, "/") || strings.HasSuffix(opts.Dest, string(filepath.Separator))) {
				return CopyOutResult{}, fmt.Errorf("runbox/docker: copy out: %w", err)
			}
			dir, to = filepath.Dir(opts.Dest), filepath.Base(opts.Dest)
		default:
			return CopyOutResult{}, fmt.Errorf("runbox/docker: copy out: %w", err)
		}
	}
	if res, err := s.copyOutAgent(ctx, opts, dir, to); !errors.Is(err, errUseEngine) {
		return res, err
	}
	got, err := s.e.cli.CopyFromContainer(ctx, s.id, client.CopyFromContainerOptions{SourcePath: opts.Source})
	if err != nil {
		return CopyOutResult{}, s.fileErr(ctx, "copy out", opts.Source, err)
	}
	defer got.Content.Close()
	res := CopyOutResult{Info: fileInfo(got.Stat)}
	if opts.Archive != nil {
		n, err := io.Copy(opts.Archive, got.Content)
		res.Bytes = n
		if err != nil {
			return res, s.copyErr(ctx, err)
		}
		return res, nil
	}
	if err := s.extractOut(&res, opts, got.Content, dir, to); err != nil {
		if errors.Is(err, ErrUnsafeArchive) || errors.Is(err, runbox.ErrInvalidCommand) {
			return res, err
		}
		return res, s.copyErr(ctx, err)
	}
	return res, nil
}

// copyErr classifies a failure while the Engine's stream was being read.
func (s *Session) copyErr(ctx context.Context, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("%w: %w", runbox.ErrSessionClosed, err)
	}
	if ctx.Err() != nil {
		return cancelled(ctx, "copy out")
	}
	return err
}

// ReadFile returns the content of one regular file of the session (through
// the agent when the session has one, else the Engine's archive endpoint).
// Symbolic links are resolved inside the session. A missing file is an
// error wrapping fs.ErrNotExist; a directory or special file wraps
// runbox.ErrInvalidCommand; a file larger than MaxSize wraps
// runbox.ErrOutputLimit.
func (s *Session) ReadFile(ctx context.Context, opts ReadFileOptions) (ReadFileResult, error) {
	if err := sessionPath("read file", opts.Path); err != nil {
		return ReadFileResult{}, err
	}
	if err := s.fileCall(ctx); err != nil {
		return ReadFileResult{}, err
	}
	limit := opts.MaxSize
	if limit <= 0 {
		limit = DefaultReadFileLimit
	}
	if res, err := s.readFileAgent(ctx, opts, limit); !errors.Is(err, errUseEngine) {
		return res, err
	}
	p := opts.Path
	for range 2 { // the path, then what its symbolic link resolves to
		got, err := s.e.cli.CopyFromContainer(ctx, s.id, client.CopyFromContainerOptions{SourcePath: p})
		if err != nil {
			return ReadFileResult{}, s.fileErr(ctx, "read file", opts.Path, err)
		}
		info := fileInfo(got.Stat)
		if info.Mode&fs.ModeSymlink != 0 && info.LinkTarget != "" && p == opts.Path {
			got.Content.Close()
			p = info.LinkTarget
			continue
		}
		defer got.Content.Close()
		if !info.Mode.IsRegular() {
			return ReadFileResult{}, fmt.Errorf("%w: read file %s: not a regular file (%s)", runbox.ErrInvalidCommand, opts.Path, info.Mode.Type())
		}
		if info.Size > limit {
			return ReadFileResult{}, fmt.Errorf("%w: read file %s: %d bytes, more than %d", runbox.ErrOutputLimit, opts.Path, info.Size, limit)
		}
		tr := tar.NewReader(got.Content)
		hdr, err := tr.Next()
		if err != nil {
			return ReadFileResult{}, s.copyErr(ctx, fmt.Errorf("runbox/docker: read file %s: %w", opts.Path, err))
		}
		if hdr.Typeflag != tar.TypeReg {
			return ReadFileResult{}, fmt.Errorf("%w: read file %s: not a regular file", runbox.ErrInvalidCommand, opts.Path)
		}
		data, err := io.ReadAll(io.LimitReader(tr, limit+1))
		if err != nil {
			return ReadFileResult{}, s.copyErr(ctx, fmt.Errorf("runbox/docker: read file %s: %w", opts.Path, err))
		}
		if int64(len(data)) > limit {
			return ReadFileResult{}, fmt.Errorf("%w: read file %s: more than %d bytes", runbox.ErrOutputLimit, opts.Path, limit)
		}
		info.Size = int64(len(data))
		return ReadFileResult{Data: data, Info: info}, nil
	}
	return ReadFileResult{}, fmt.Errorf("%w: read file %s: a symbolic link to a symbolic link", runbox.ErrInvalidCommand, opts.Path)
}

// fileMode is a tar header's mode for WriteFileOptions.Mode: 0644 when it
// has no permission bits.
func fileMode(m fs.FileMode) int64 {
	mode := int64(m & fs.ModePerm)
	if mode == 0 {
		mode = 0o644
	}
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// WriteFile creates or replaces one regular file in the session with the
// given content, mode and owner. Its directory must exist (else the error
// wraps fs.ErrNotExist); an existing directory at Path is not replaced
// (runbox.ErrInvalidCommand).
func (s *Session) WriteFile(ctx context.Context, opts WriteFileOptions) (WriteFileResult, error) {
	if err := sessionPath("write file", opts.Path); err != nil {
		return WriteFileResult{}, err
	}
	name := path.Base(opts.Path)
	if strings.HasSuffix(opts.Path, "/") || name == "/" || name == "." || name == ".." {
		return WriteFileResult{}, fmt.Errorf("%w: write file: %q does not name a file", runbox.ErrInvalidCommand, opts.Path)
	}
	if opts.Mode&^(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return WriteFileResult{}, fmt.Errorf("%w: write file: mode %s is not a regular file's", runbox.ErrInvalidCommand, opts.Mode)
	}
	content, size := opts.Content, opts.Size
	if content == nil {
		content, size = bytes.NewReader(opts.Data), int64(len(opts.Data))
	} else if opts.Data != nil || size < 0 {
		return WriteFileResult{}, fmt.Errorf("%w: write file: Content needs its Size (and no Data)", runbox.ErrInvalidCommand)
	}
	if opts.UID < 0 || opts.GID < 0 {
		return WriteFileResult{}, fmt.Errorf("%w: write file: negative owner", runbox.ErrInvalidCommand)
	}
	if err := s.fileCall(ctx); err != nil {
		return WriteFileResult{}, err
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: size, Mode: fileMode(opts.Mode),
		Uid: opts.UID, Gid: opts.GID, ModTime: time.Now(), Format: tar.FormatPAX,
	}
	if opts.Content == nil { // bytes can be sent again through the Engine
		if res, err := s.writeFileAgent(ctx, opts, hdr); !errors.Is(err, errUseEngine) {
			return res, err
		}
		hdr.Name = name
	}
	// The Engine reports a directory in the way as a server error
	// (API 1.41): ask first, so the caller learns what is wrong.
	if st, err := s.e.cli.ContainerStatPath(ctx, s.id, client.ContainerStatPathOptions{Path: opts.Path}); err == nil && st.Stat.Mode.IsDir() {
		return WriteFileResult{}, fmt.Errorf("%w: write file: %s is a directory", runbox.ErrInvalidCommand, opts.Path)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := func() error {
			tw := tar.NewWriter(pw)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if n, err := io.CopyN(tw, content, size); err != nil {
				if err == io.EOF {
					return fmt.Errorf("%w: write file: Content ended after %d of %d bytes", runbox.ErrInvalidCommand, n, size)
				}
				return err
			}
			return tw.Close()
		}()
		pw.CloseWithError(err)
		done <- err
	}()
	_, err := s.e.cli.CopyToContainer(ctx, s.id, client.CopyToContainerOptions{DestinationPath: path.Dir(opts.Path), Content: pr})
	pr.CloseWithError(errCopyEnded)
	if werr := <-done; werr != nil && !errors.Is(werr, errCopyEnded) {
		if errors.Is(werr, runbox.ErrInvalidCommand) {
			return WriteFileResult{}, werr
		}
		return WriteFileResult{}, fmt.Errorf("runbox/docker: write file %s: %w", opts.Path, werr)
	}
	if err != nil {
		return WriteFileResult{}, s.fileErr(ctx, "write file", opts.Path, err)
	}
	return WriteFileResult{Bytes: size}, nil
}
