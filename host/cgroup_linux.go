package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is a per-process cgroup v2 directory. Killing it with cgroup.kill
// reaches every process in it, whatever sessions or groups they created,
// and the kernel reports when it is empty.
type cgroup struct {
	dir    string
	fd     int // directory: clone3's target, and fstat to count child cgroups
	events int // cgroup.events, read with pread
	// killed records a write to cgroup.kill. Such a cgroup is never reused:
	// the kernel kills a child that clone3 places into a cgroup whose kill
	// count differs from the parent's, so every later process would die at
	// birth.
	killed atomic.Bool
}

// maxIdleCgroups bounds the emptied cgroups an executor keeps for reuse.
const maxIdleCgroups = 4

// cgroupPool hands out per-process cgroups and keeps emptied ones for the
// next process: the first process placed in a fresh cgroup costs the kernel
// noticeably more than one placed in a cgroup that was used before (about
// an eighth of spawning `true`, measured), on top of the mkdir and rmdir.
type cgroupPool struct {
	root string
	// setup prepares a fresh cgroup (writes its limits); nil for none.
	setup  func(dir string) error
	mu     sync.Mutex
	idle   []*cgroup
	closed bool
}

func (p *cgroupPool) get() (*cgroup, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := createCgroup(p.root, cgroupSeq.Add(1))
	if err == nil && p.setup != nil {
		if err = p.setup(c.dir); err != nil {
			_ = c.remove()
			return nil, err
		}
	}
	return c, err
}

// put takes back a cgroup whose processes are all gone. It is kept only if
// nothing was left in it (a child cgroup the process created, say);
// otherwise it is removed, and a failure to remove it is returned.
func (p *cgroupPool) put(c *cgroup) error {
	if c.reusable() {
		p.mu.Lock()
		if !p.closed && len(p.idle) < maxIdleCgroups {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
	}
	return c.remove()
}

// close removes the idle cgroups; cgroups of running processes are removed
// when those end.
func (p *cgroupPool) close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.remove())
	}
	return errors.Join(errs...)
}

// probeCgroupRoot finds the caller's own cgroup in a cgroup v2 hierarchy
// and checks that a child cgroup with cgroup.kill (Linux 5.14+) can be
// created there. It returns "" when that is not possible.
func probeCgroupRoot() string {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	root := cgroupDir(string(self), string(mountinfo))
	if root == "" {
		return ""
	}
	probe := filepath.Join(root, fmt.Sprintf("runbox-host-probe-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return ""
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return ""
	}
	sweepStaleCgroups(root)
	return root
}

// sweepStaleCgroups removes per-process cgroups left by an executor whose
// process died before it could remove them (killed outright, for
// example). Only cgroups named after a pid that no longer exists are
// touched, and rmdir itself refuses a cgroup that still has members.
func sweepStaleCgroups(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), "runbox-host-")
		if !ok || !ent.IsDir() {
			continue
		}
		rest = strings.TrimPrefix(rest, "probe-")
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == self {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			_ = unix.Rmdir(filepath.Join(root, ent.Name()))
		}
	}
}

// cgroupDir maps the unified-hierarchy entry of /proc/self/cgroup ("0::"
// path) to a directory through a cgroup2 mount in mountinfo. It handles
// hybrid hosts, where cgroup2 is mounted beside v1 controllers (for example
// at /sys/fs/cgroup/unified), and mounts whose root is not the hierarchy's
// root.
func cgroupDir(self, mountinfo string) string {
	for _, line := range strings.Split(self, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return hierarchyDir(p, mountinfo, func(fstype, _ string) bool { return fstype == "cgroup2" })
		}
	}
	return ""
}

// cgroupV1Dir is cgroupDir for the cgroup v1 hierarchy that holds
// controller (a hybrid or legacy host), "" when there is none.
func cgroupV1Dir(self, mountinfo, controller string) string {
	for _, line := range strings.Split(self, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[0] != "0" && slices.Contains(strings.Split(f[1], ","), controller) {
			return hierarchyDir(f[2], mountinfo, func(fstype, opts string) bool {
				return fstype == "cgroup" && slices.Contains(strings.Split(opts, ","), controller)
			})
		}
	}
	return ""
}

// hierarchyDir maps rel, a path inside a cgroup hierarchy, to a directory
// through the first mount in mountinfo that match accepts (by file system
// type and super options) and whose root contains rel.
func hierarchyDir(rel, mountinfo string, match func(fstype, opts string) bool) string {
	if !strings.HasPrefix(rel, "/") {
		return ""
	}
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf := strings.Fields(post)
		if len(pf) < 3 || !match(pf[0], pf[2]) {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 {
			continue
		}
		mroot, mpoint := unescapeMount(f[3]), unescapeMount(f[4])
		var sub string
		switch {
		case mroot == "/":
			sub = rel
		case rel == mroot:
			sub = "/"
		case strings.HasPrefix(rel, mroot+"/"):
			sub = strings.TrimPrefix(rel, mroot)
		default:
			continue
		}
		dir := filepath.Join(mpoint, sub)
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return dir
		}
	}
	return ""
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// createCgroup makes a fresh child of root and opens it.
func createCgroup(root string, seq uint64) (*cgroup, error) {
	var dir string
	for attempt := 0; ; attempt++ {
		dir = filepath.Join(root, fmt.Sprintf("runbox-host-%d-%d-%d", os.Getpid(), seq, attempt))
		err := unix.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		// A leftover from an earlier process with our pid: pick another name.
		if !errors.Is(err, unix.EEXIST) || attempt >= 8 {
			return nil, err
		}
	}
	c := &cgroup{dir: dir, fd: -1, events: -1}
	var err error
	if c.fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		c.events, err = unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// closeFDs releases the descriptors; the directory stays.
func (c *cgroup) closeFDs() {
	for _, fd := range []*int{&c.fd, &c.events} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// reusable reports whether the cgroup holds nothing: no process and no
// child cgroup. A kernfs directory's link count is 2 plus its
// subdirectories.
func (c *cgroup) reusable() bool {
	if c.fd < 0 || c.events < 0 || c.killed.Load() {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(c.fd, &st) != nil || st.Nlink != 2 {
		return false
	}
	pop, err := c.populated()
	return err == nil && !pop
}

// populated reads cgroup.events. A zombie does not count: the kernel
// removes a task from its cgroup when it exits, before it is reaped.
func (c *cgroup) populated() (bool, error) {
	var buf [256]byte
	n, err := unix.Pread(c.events, buf[:], 0)
	if err != nil {
		return false, fmt.Errorf("host: read %s/cgroup.events: %w", c.dir, err)
	}
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0", nil
		}
	}
	return false, fmt.Errorf("no populated field in %s/cgroup.events", c.dir)
}

// kill sends SIGKILL to every process in the cgroup and its descendants,
// atomically with respect to forks.
func (c *cgroup) kill() error {
	c.killed.Store(true)
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("host: cgroup.kill: %w", err)
	}
	return nil
}

// signalAll sends sig to each current member. Unlike cgroup.kill it races
// with forks, which is acceptable for a polite signal that Terminate
// follows with a kill.
func (c *cgroup) signalAll(sig syscall.Signal) error {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("host: cgroup.procs: %w", err)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, sig)
		}
	}
	return nil
}

// drain kills whatever is still in the cgroup and waits until it is empty.
func (c *cgroup) drain() error {
	pop, err := c.populated()
	if err != nil {
		return err
	}
	if !pop {
		return nil
	}
	if err := c.kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(cleanupTimeout)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		pop, err := c.populated()
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("host: cgroup %s still populated %v after cgroup.kill", c.dir, cleanupTimeout)
		}
		time.Sleep(delay)
	}
}

// remove deletes the (empty) cgroup. EBUSY right after the last exit can be
// transient, so it is retried briefly; a cgroup that stays busy (a process
// or a child cgroup appeared in it) is a cleanup failure and is left in
// place.
func (c *cgroup) remove() error {
	c.closeFDs()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = unix.Rmdir(c.dir); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
	return fmt.Errorf("host: remove cgroup %s: %w", c.dir, err)
}
