package cgroup

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

// namePrefix starts the name of every cgroup this package creates, so that
// SweepStale recognises them; the next part is the creating process's pid.
const namePrefix = "runbox-host-"

// seq numbers cgroups across the whole program.
var seq atomic.Uint64

// Name returns a cgroup name unique in this program and across live
// processes: the prefix, this process's pid and a sequence number.
func Name() string {
	return fmt.Sprintf("%s%d-%d", namePrefix, os.Getpid(), seq.Add(1))
}

// Dir returns the cgroup's directory.
func (c *Group) Dir() string { return c.dir }

// FD returns the open cgroup directory, which clone3 takes to start a
// child inside the cgroup.
func (c *Group) FD() int { return c.fd }

// NewPool returns a Pool of cgroups under root (see ProbeRoot).
func NewPool(root string) *Pool { return &Pool{root: root} }

// Root returns the directory the pool's cgroups are created in.
func (p *Pool) Root() string { return p.root }

// Group is a per-process cgroup v2 directory. Killing it with cgroup.kill
// reaches every process in it, whatever sessions or groups they created,
// and the kernel reports when it is empty.
type Group struct {
	dir    string
	fd     int // directory: clone3's target, and fstat to count child cgroups
	events int // cgroup.events, read with pread
	// killed records a write to cgroup.kill. Such a cgroup is never reused:
	// the kernel kills a child that clone3 places into a cgroup whose kill
	// count differs from the parent's, so every later process would die at
	// birth.
	killed atomic.Bool
}

// maxIdleCgroups bounds the emptied cgroups a Pool keeps for reuse.
const maxIdleCgroups = 4

// Pool hands out per-process cgroups and keeps emptied ones for the
// next process: the first process placed in a fresh cgroup costs the kernel
// noticeably more than one placed in a cgroup that was used before (about
// an eighth of spawning `true`, measured), on top of the mkdir and rmdir.
type Pool struct {
	root string
	// Setup prepares a fresh cgroup (writes its limits); nil for none.
	// Set it before the first Get.
	Setup  func(dir string) error
	mu     sync.Mutex
	idle   []*Group
	closed bool
}

// Get returns an empty cgroup: an idle one, or a fresh one set up by
// Setup.
func (p *Pool) Get() (*Group, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := Create(p.root)
	if err == nil && p.Setup != nil {
		if err = p.Setup(c.dir); err != nil {
			_ = c.Remove()
			return nil, err
		}
	}
	return c, err
}

// Put takes back a cgroup whose processes are all gone. It is kept only if
// nothing was left in it (a child cgroup the process created, say);
// otherwise it is removed, and a failure to remove it is returned.
func (p *Pool) Put(c *Group) error {
	if c.Reusable() {
		p.mu.Lock()
		if !p.closed && len(p.idle) < maxIdleCgroups {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
	}
	return c.Remove()
}

// Close removes the idle cgroups; cgroups of running processes are removed
// when those end.
func (p *Pool) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, c := range idle {
		errs = append(errs, c.Remove())
	}
	return errors.Join(errs...)
}

// ProbeRoot finds the caller's own cgroup in a cgroup v2 hierarchy
// and checks that a child cgroup with cgroup.kill (Linux 5.14+) can be
// created there. It returns "" when that is not possible.
func ProbeRoot() string {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	root := Dir(string(self), string(mountinfo))
	if root == "" {
		return ""
	}
	probe := filepath.Join(root, fmt.Sprintf("%sprobe-%d-%d", namePrefix, os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return ""
	}
	defer os.Remove(probe)
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return ""
	}
	SweepStale(root)
	return root
}

// SweepStale removes per-process cgroups left by an executor whose
// process died before it could remove them (killed outright, for
// example). Only cgroups named after a pid that no longer exists are
// touched, and rmdir itself refuses a cgroup that still has members.
func SweepStale(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), namePrefix)
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

// Dir maps the unified-hierarchy entry of /proc/self/cgroup ("0::"
// path) to a directory through a cgroup2 mount in mountinfo. It handles
// hybrid hosts, where cgroup2 is mounted beside v1 controllers (for example
// at /sys/fs/cgroup/unified), and mounts whose root is not the hierarchy's
// root.
func Dir(self, mountinfo string) string {
	for _, line := range strings.Split(self, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return hierarchyDir(p, mountinfo, func(fstype, _ string) bool { return fstype == "cgroup2" })
		}
	}
	return ""
}

// V1Dir is Dir for the cgroup v1 hierarchy that holds
// controller (a hybrid or legacy host), "" when there is none.
func V1Dir(self, mountinfo, controller string) string {
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

// Create makes a fresh child of root and opens it.
func Create(root string) (*Group, error) {
	base := Name()
	var dir string
	for attempt := 0; ; attempt++ {
		dir = filepath.Join(root, fmt.Sprintf("%s-%d", base, attempt))
		err := unix.Mkdir(dir, 0o755)
		if err == nil {
			break
		}
		// A leftover from an earlier process with our pid: pick another name.
		if !errors.Is(err, unix.EEXIST) || attempt >= 8 {
			return nil, err
		}
	}
	c := &Group{dir: dir, fd: -1, events: -1}
	var err error
	if c.fd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		c.events, err = unix.Open(filepath.Join(dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		c.Remove()
		return nil, err
	}
	return c, nil
}

// CloseFDs releases the descriptors; the directory stays.
func (c *Group) CloseFDs() {
	for _, fd := range []*int{&c.fd, &c.events} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// Reusable reports whether the cgroup holds nothing: no process and no
// child cgroup. A kernfs directory's link count is 2 plus its
// subdirectories.
func (c *Group) Reusable() bool {
	if c.fd < 0 || c.events < 0 || c.killed.Load() {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(c.fd, &st) != nil || st.Nlink != 2 {
		return false
	}
	pop, err := c.Populated()
	return err == nil && !pop
}

// Populated reads cgroup.events. A zombie does not count: the kernel
// removes a task from its cgroup when it exits, before it is reaped.
func (c *Group) Populated() (bool, error) {
	var buf [256]byte
	n, err := unix.Pread(c.events, buf[:], 0)
	if err != nil {
		return false, fmt.Errorf("read %s/cgroup.events: %w", c.dir, err)
	}
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(bytes.TrimSpace(v)) != "0", nil
		}
	}
	return false, fmt.Errorf("no populated field in %s/cgroup.events", c.dir)
}

// Kill sends SIGKILL to every process in the cgroup and its descendants,
// atomically with respect to forks.
func (c *Group) Kill() error {
	c.killed.Store(true)
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return fmt.Errorf("cgroup.kill: %w", err)
	}
	return nil
}

// SignalAll sends sig to each current member. Unlike cgroup.kill it races
// with forks, which is acceptable for a polite signal that Terminate
// follows with a kill.
func (c *Group) SignalAll(sig syscall.Signal) error {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup.procs: %w", err)
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, sig)
		}
	}
	return nil
}

// Drain kills whatever is still in the cgroup and waits, up to timeout,
// until it is empty.
func (c *Group) Drain(timeout time.Duration) error {
	pop, err := c.Populated()
	if err != nil {
		return err
	}
	if !pop {
		return nil
	}
	if err := c.Kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		pop, err := c.Populated()
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still populated %v after cgroup.kill", c.dir, timeout)
		}
		time.Sleep(delay)
	}
}

// Remove deletes the (empty) cgroup. EBUSY right after the last exit can be
// transient, so it is retried briefly; a cgroup that stays busy (a process
// or a child cgroup appeared in it) is a cleanup failure and is left in
// place.
func (c *Group) Remove() error {
	c.CloseFDs()
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
	return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
}
