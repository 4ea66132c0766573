package docker

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ErrUnsafeArchive reports an archive from a session that tried to place
// something outside the destination on the host: an absolute name, a ".."
// component, a name that passes through a symbolic link, or a hard link to
// something that is not a regular file already extracted. Nothing is
// written for the offending entry, and the copy stops there.
var ErrUnsafeArchive = errors.New("runbox/docker: unsafe entry in a session's archive")

// extraction places one archive from a session under a host directory.
// Every file operation goes through root (an os.Root), so no name can
// leave the directory even through a symbolic link; on top of that, no
// entry may pass through a symbolic link at all, an existing file is
// removed before it is replaced (never written through), and device
// nodes and FIFOs are skipped.
type extraction struct {
	root     *os.Root
	from, to string // the archive's top name, and the name it gets under root ("." for root itself)
	chown    bool   // apply the entries' owners (Lchown)
	res      *CopyOutResult
	dirs     []dirMeta // applied last, deepest first, so read-only directories can be filled
}

type dirMeta struct {
	name string
	hdr  *tar.Header
}

// rebase maps an archive name to a name under root, or fails with
// ErrUnsafeArchive.
func (x *extraction) rebase(name string) (string, error) {
	if strings.ContainsRune(name, 0) || path.IsAbs(name) || strings.HasPrefix(name, `\`) {
		return "", fmt.Errorf("%w: %q is absolute", ErrUnsafeArchive, name)
	}
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("%w: %q has a .. component", ErrUnsafeArchive, name)
		}
	}
	var rest string
	switch {
	case clean == x.from:
	case x.from == ".":
		rest = clean
	case strings.HasPrefix(clean, x.from+"/"):
		rest = clean[len(x.from)+1:]
	default:
		return "", fmt.Errorf("%w: %q is outside %q, the path that was copied", ErrUnsafeArchive, name, x.from)
	}
	out := path.Join(x.to, rest)
	local := filepath.FromSlash(out)
	if out != "." && !filepath.IsLocal(local) {
		return "", fmt.Errorf("%w: %q is not a local name on this system", ErrUnsafeArchive, name)
	}
	return local, nil
}

// checkParents fails when a directory on the way to name is a symbolic
// link or not a directory. Missing directories are created.
func (x *extraction) checkParents(name string) error {
	dir := filepath.Dir(name)
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		fi, err := x.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err := x.root.Mkdir(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %q passes through the symbolic link %q", ErrUnsafeArchive, filepath.ToSlash(name), filepath.ToSlash(p))
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: %q passes through %q, which is not a directory", ErrUnsafeArchive, filepath.ToSlash(name), filepath.ToSlash(p))
		}
	}
	return nil
}

// clear removes a non-directory at name, so that the new entry replaces
// it instead of being written through it. A directory there is an error
// unless the new entry is a directory too (then keep reports true).
func (x *extraction) clear(name string, dir bool) (keep bool, err error) {
	fi, err := x.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.IsDir() {
		if dir {
			return true, nil
		}
		return false, fmt.Errorf("runbox/docker: copy out: %q is a directory on the host and would be replaced by a non-directory", filepath.ToSlash(name))
	}
	return false, x.root.Remove(name)
}

// extract reads the whole archive.
func (x *extraction) extract(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("runbox/docker: copy out: reading the archive: %w", err)
		}
		if err := x.entry(tr, hdr); err != nil {
			return err
		}
	}
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.meta(d.name, d.hdr); err != nil {
			return err
		}
	}
	return nil
}

func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
		return nil // archive/tar folds these into the next header
	}
	name, err := x.rebase(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		x.res.Skipped = append(x.res.Skipped, hdr.Name)
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		x.res.Skipped = append(x.res.Skipped, hdr.Name)
		return nil
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: %q would replace the destination directory itself", ErrUnsafeArchive, hdr.Name)
		}
		return nil // the destination directory keeps its own mode and owner
	}
	if err := x.checkParents(name); err != nil {
		return err
	}
	keep, err := x.clear(name, hdr.Typeflag == tar.TypeDir)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if !keep {
			if err := x.root.Mkdir(name, 0o700); err != nil {
				return err
			}
		}
		x.dirs = append(x.dirs, dirMeta{name, hdr})
		x.res.Dirs++
		return nil
	case tar.TypeSymlink:
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		x.res.Symlinks++
		if x.chown {
			return x.root.Lchown(name, hdr.Uid, hdr.Gid)
		}
		return nil
	case tar.TypeLink:
		target, err := x.rebase(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, err)
		}
		if err := x.checkParents(target); err != nil {
			return fmt.Errorf("hard link %q: %w", hdr.Name, err)
		}
		fi, err := x.root.Lstat(target)
		if err != nil || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: hard link %q to %q, which is not a regular file extracted before it", ErrUnsafeArchive, hdr.Name, hdr.Linkname)
		}
		if err := x.root.Link(target, name); err != nil {
			return err
		}
		x.res.Files++
		return nil
	}
	// A regular file: created, never opened if something is there.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, tr)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("runbox/docker: copy out: writing %q: %w", filepath.ToSlash(name), err)
	}
	x.res.Files++
	x.res.Bytes += n
	return x.meta(name, hdr)
}

// meta applies mode, owner and modification time. Set-user-ID and
// set-group-ID bits never reach the host: a session's root could
// otherwise plant a set-user-ID program for whoever runs the copy.
func (x *extraction) meta(name string, hdr *tar.Header) error {
	mode := fs.FileMode(hdr.Mode) & fs.ModePerm
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if x.chown {
		if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if err := x.root.Chmod(name, mode); err != nil {
		return err
	}
	if !hdr.ModTime.IsZero() {
		if err := x.root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
			return err
		}
	}
	return nil
}
