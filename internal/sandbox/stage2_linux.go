package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// The stage-2 helper runs in a re-executed copy of the program (see
// runbox.Init), as the init (PID 1) of fresh user, mount, PID, IPC and
// (without network) network namespaces. It builds the sandbox's filesystem,
// then starts the command from one OS thread that it first restricts
// (no_new_privs, Landlock, no capabilities, seccomp), so that only the
// command inherits those restrictions. It stays as init: it forwards
// signals to the command, reaps orphans, reports the command's status on
// fd 4 and exits with the command, which makes the kernel kill whatever is
// left in the namespace.

// Helper file descriptors, from exec.Cmd.ExtraFiles: the spec, then the
// status pipe (StatusFD); what follows is described by the spec.
const (
	helperSpecFD = 3
	// StatusFD is the helper's status pipe; the spec's LimitFDs and
	// ControlFD come after it.
	StatusFD = 4
)

// Where the helper assembles the new root. The base is a fresh tmpfs
// mounted over /tmp in the helper's private mount namespace only.
const (
	sandboxBase    = "/tmp"
	sandboxNewRoot = "/newroot"
	sandboxOldRoot = "/oldroot"
)

func stage2Main() int {
	// The main thread (the thread-group leader, which is what others see
	// as this process) must never pick up the command's restrictions, so
	// the goroutine that applies them must not run on it.
	runtime.LockOSThread()
	// Neither descriptor may reach the command.
	unix.CloseOnExec(helperSpecFD)
	unix.CloseOnExec(StatusFD)
	status := os.NewFile(StatusFD, "status")
	fail := func(err error) int {
		_ = writeStatus(status, statusError, []byte(err.Error()))
		return 125
	}
	specF := os.NewFile(helperSpecFD, "spec")
	var conf Spec
	err := json.NewDecoder(specF).Decode(&conf)
	specF.Close()
	if err != nil {
		return fail(fmt.Errorf("read spec: %w", err))
	}
	for _, fd := range conf.LimitFDs {
		unix.CloseOnExec(fd)
	}
	keep := append([]int{StatusFD}, conf.LimitFDs...)
	if conf.Prepared {
		unix.CloseOnExec(conf.ControlFD)
		keep = append(keep, conf.ControlFD)
	}
	// Whatever else came through exec belongs to the calling program (or its
	// parent): a file, directory, socket or pipe outside the policy. The
	// helper holds none of it, and, not dumpable, cannot be reached through
	// /proc/1/fd by the command either.
	if err := dropInherited(keep...); err != nil {
		return fail(fmt.Errorf("close inherited descriptors: %w", err))
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("not dumpable: %w", err))
	}
	if !conf.Probe && !conf.Prepared && conf.Path == "" {
		return fail(errHelperNoCommand)
	}
	mech := []string{"user-ns", "mount-ns", "pid-ns", "ipc-ns"}
	if err := buildRoot(&conf); err != nil {
		return fail(err)
	}
	mech = append(mech, "proc")
	if !conf.BroadWrite {
		mech = append(mech, "mount-ro")
	}
	if !conf.Network {
		mech = append(mech, "net-ns")
		// Loopback up: programs may talk to themselves; the host's
		// loopback is another interface in another namespace.
		_ = loopbackUp()
	}

	// The restrictions go on one locked thread, which is never unlocked:
	// when its goroutine ends, the runtime retires the thread with them.
	ch := make(chan started, 1)
	go commandThread(&conf, slices.Clone(mech), status, ch)
	st := <-ch
	switch {
	case errors.Is(st.err, errNoCommand):
		return 0 // a prepared sandbox that was never used
	case st.err != nil:
		return fail(st.err)
	}
	mech = append(mech, st.mech...)
	if conf.Probe && !conf.Prepared {
		b, _ := json.Marshal(mech)
		_ = writeStatus(status, statusProbe, b)
		return 0
	}
	// Signals for the tree arrive here first (the parent signals the
	// helper's process group); pass them on to the command's group.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	pid := st.proc.Pid
	if err := writeStatus(status, statusRunning, nil); err != nil {
		return 125
	}
	done := make(chan unix.WaitStatus, 1)
	go reapAll(pid, done)
	for {
		select {
		case s := <-sigs:
			n := s.(syscall.Signal)
			if unix.Kill(-pid, n) != nil {
				_ = unix.Kill(pid, n)
			}
		case ws := <-done:
			var b [4]byte
			code := ws.ExitStatus()
			kind := byte(statusExit)
			if ws.Signaled() {
				kind = statusSignal
				binary.BigEndian.PutUint32(b[:], uint32(ws.Signal()))
				code = 128 + int(ws.Signal())
			} else {
				binary.BigEndian.PutUint32(b[:], uint32(code))
			}
			_ = writeStatus(status, kind, b[:])
			// Exiting as init kills everything left in the namespace.
			return code
		}
	}
}

// started is what the command thread hands back to the helper's main
// goroutine: the command it started (none for a probe), what it applied,
// or why it failed.
type started struct {
	proc *os.Process
	mech []string
	err  error
}

// commandThread runs on its own locked OS thread, which takes the
// restrictions (and the cgroup v1 limit groups) that only the command may
// inherit, and starts the command from it. base is what the helper applied
// to the whole sandbox so far. A prepared sandbox reports on status what
// it applied, then waits for its command (prepared_linux.go): since the
// restrictions do not depend on the command, they are in place before
// anything of it arrives.
func commandThread(conf *Spec, base []string, status *os.File, ch chan<- started) {
	runtime.LockOSThread()
	m, err := joinLimits(conf)
	if err == nil {
		var r []string
		r, err = restrictThread(conf)
		m = append(m, r...)
	}
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if err == nil && conf.Prepared {
		b, _ := json.Marshal(append(slices.Clone(base), m...))
		if err = writeStatus(status, statusProbe, b); err == nil {
			stdio, err = awaitCommand(conf)
		}
	}
	if err == nil && conf.Expect != nil {
		// What the executor reports was proven by its probe; a launch
		// that would apply anything else is refused, never run weaker.
		if got := append(slices.Clone(base), m...); !sameSet(got, conf.Expect) {
			err = fmt.Errorf("%w: applied %v, proven %v", errMechanismsDiffer, got, conf.Expect)
		}
	}
	if err == nil {
		// Last thing before exec: nothing above stderr survives it, not
		// even a descriptor opened since the start.
		if err = CloseInheritedOnExec(); err != nil {
			err = fmt.Errorf("close-on-exec: %w", err)
		}
	}
	if err != nil || (conf.Probe && !conf.Prepared) {
		ch <- started{mech: m, err: err}
		return
	}
	p, err := os.StartProcess(conf.Path, conf.Args, &os.ProcAttr{
		Dir:   conf.Dir,
		Env:   conf.Env,
		Files: stdio,
		// A session of its own: the terminal (if any) becomes its
		// controlling terminal, and signals reach it as a group.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: conf.TTY, Ctty: 0},
	})
	if conf.Prepared {
		// The command has its copies; the helper keeps none, so that the
		// caller's pipes end with the command's tree.
		for _, f := range stdio {
			f.Close()
		}
	}
	ch <- started{proc: p, mech: m, err: err}
}

// errMechanismsDiffer refuses a launch whose sandbox differs from the one
// the executor's probe proved.
var errMechanismsDiffer = errors.New("the sandbox differs from the one proven at New")

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// joinLimits moves the calling thread, and so the command it forks, into
// the launch's cgroup v1 limit groups; the helper's other threads stay
// outside. A group that cannot be joined fails the launch (the command is
// never run without a limit it was given); a probe reports only what it
// joined.
func joinLimits(c *Spec) ([]string, error) {
	var joined []string
	for i, fd := range c.LimitFDs {
		_, err := unix.Write(fd, []byte("0"))
		unix.Close(fd)
		switch {
		case err == nil && i < len(c.LimitNames):
			joined = append(joined, c.LimitNames[i])
		case err != nil && !c.Probe:
			return nil, fmt.Errorf("join limit cgroup: %w", err)
		}
	}
	return joined, nil
}

// reapAll reaps every child of init (orphans are re-parented to it) until
// the command itself ends.
func reapAll(pid int, done chan<- unix.WaitStatus) {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// No child left, which cannot happen before the command's end
			// was seen; report it as a failure rather than spinning.
			done <- unix.WaitStatus(255 << 8)
			return
		}
		if got == pid {
			done <- ws
			return
		}
	}
}

// buildRoot assembles the sandbox's root and pivots into it: the host's
// tree bound read-only (unless BroadWrite), the writable roots bound
// read-write, the visible paths bound read-only, a fresh /proc for the new
// PID namespace, a minimal /dev, and private /tmp and /run.
func buildRoot(c *Spec) error {
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("sandbox setup: %s: %w", what, err)
		}
		return nil
	}
	// Nothing done here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return step("make mounts private", err)
	}
	if err := unix.Mount("tmpfs", sandboxBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return step("mount base tmpfs", err)
	}
	for _, d := range []string{sandboxNewRoot, sandboxOldRoot} {
		if err := unix.Mkdir(sandboxBase+d, 0o700); err != nil {
			return step("mkdir "+d, err)
		}
	}
	if err := unix.PivotRoot(sandboxBase, sandboxBase+sandboxOldRoot); err != nil {
		return step("pivot_root to base", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return step("chdir", err)
	}
	// After the pivot the host's tree is /oldroot, and its /tmp is no longer
	// covered by the base.
	if err := unix.Mount(sandboxOldRoot, sandboxNewRoot, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return step("bind host root", err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if !c.BroadWrite {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, sandboxNewRoot, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr}); err != nil {
		return step("make host root read-only", err)
	}
	nr := func(p string) string { return sandboxNewRoot + p }
	if err := unix.Mount("proc", nr("/proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return step("mount /proc", err)
	}
	// Kernel tunables stay read-only even for a root that owns them.
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"} {
		if _, err := os.Lstat(nr(p)); err == nil {
			if err := bindPath(nr(p), nr(p), true); err != nil {
				return step("read-only "+p, err)
			}
		}
	}
	if err := buildDev(nr("/dev")); err != nil {
		return step("/dev", err)
	}
	if c.TTY {
		if err := bindTerminal(nr("/dev/console")); err != nil {
			return step("/dev/console", err)
		}
	}
	if !c.BroadWrite {
		if err := unix.Mount("tmpfs", nr("/tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return step("mount /tmp", err)
		}
	}
	// /run holds the host's service sockets (a container engine's among
	// them), which a read-only mount does not stop anyone from connecting to.
	if fi, err := os.Lstat(nr("/run")); err == nil && fi.IsDir() {
		if err := unix.Mount("tmpfs", nr("/run"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return step("mount /run", err)
		}
	}
	type bind struct {
		path string
		ro   bool
	}
	var binds []bind
	for _, p := range c.Writable {
		binds = append(binds, bind{p, false})
	}
	for _, p := range c.Visible {
		binds = append(binds, bind{p, true})
	}
	// Parents first, so that a nested root is bound on top of its parent.
	slices.SortStableFunc(binds, func(a, b bind) int { return strings.Compare(a.path, b.path) })
	for _, b := range binds {
		if err := bindPath(sandboxOldRoot+b.path, nr(b.path), b.ro); err != nil {
			return step("bind "+b.path, err)
		}
	}
	if err := unix.Chdir(sandboxNewRoot); err != nil {
		return step("chdir new root", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return step("pivot_root", err)
	}
	// The old root (the base with the host's tree under it) is now stacked
	// under "."; detach it so that nothing of it stays reachable.
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return step("detach old root", err)
	}
	return step("chdir /", unix.Chdir("/"))
}

// noSymlinks resolves a path without following any symlink, so that a
// component swapped for a symlink after preparation fails instead of
// redirecting the bind.
func noSymlinks(path string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
}

// bindPath binds src (a directory tree or a file) onto dst, creating dst in
// a private tmpfs when needed.
func bindPath(src, dst string, ro bool) error {
	sfd, err := noSymlinks(src)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Mkdir(dst, 0o755)
		} else {
			var fd int
			fd, err = unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
			if err == nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			return err
		}
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if ro {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	return attachClone(sfd, dst, attr, true)
}

// attachClone mounts a clone of the tree at sfd (recursively, or just its
// top mount) with attr onto dst, which is reached without following any
// symlink.
func attachClone(sfd int, dst string, attr uint64, recursive bool) error {
	openFlags := uint(unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_EMPTY_PATH)
	setFlags := unix.AT_EMPTY_PATH
	if recursive {
		openFlags |= unix.AT_RECURSIVE
		setFlags |= unix.AT_RECURSIVE
	}
	tree, err := unix.OpenTree(sfd, "", openFlags)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", uint(setFlags), &unix.MountAttr{Attr_set: attr}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	dfd, err := noSymlinks(dst)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.MoveMount(tree, "", dfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// buildDev mounts a minimal /dev: the harmless character devices bound
// from the host, a private devpts and shm, and the usual symlinks.
func buildDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p := filepath.Join(dev, n)
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return err
		}
		unix.Close(fd)
		if err := unix.Mount(filepath.Join(sandboxOldRoot, "dev", n), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", n, err)
		}
	}
	for link, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	} {
		if err := unix.Symlink(target, filepath.Join(dev, link)); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := unix.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	// A private devpts lets the command open new terminals; it is a
	// convenience, so a kernel that refuses it in a user namespace is no
	// failure.
	_ = unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	return unix.Mount("tmpfs", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777")
}

// bindTerminal makes the command's terminal, the helper's fd 0, findable
// by ttyname(3) (tty, ssh, gpg): it lives in the host's devpts, not in the
// sandbox's private one, so its device is bound onto dst (/dev/console),
// where the search through /dev finds the same inode. What fd 0 names is
// checked to be that very device before it is bound; anything else
// (stdin not from a terminal in /dev) binds nothing.
func bindTerminal(dst string) error {
	var want unix.Stat_t
	if err := unix.Fstat(0, &want); err != nil || want.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil
	}
	link, err := os.Readlink(sandboxOldRoot + "/proc/self/fd/0")
	if err != nil || !strings.HasPrefix(link, "/dev/") {
		return nil
	}
	sfd, err := noSymlinks(sandboxOldRoot + link)
	if err != nil {
		return nil
	}
	defer unix.Close(sfd)
	var got unix.Stat_t
	if err := unix.Fstat(sfd, &got); err != nil || got.Dev != want.Dev || got.Ino != want.Ino || got.Rdev != want.Rdev {
		return nil
	}
	fd, err := unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return attachClone(sfd, dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false)
}

// loopbackUp brings the new network namespace's lo interface up.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// restrictThread applies, to the calling (locked) thread only, what the
// command inherits: no_new_privs, a Landlock domain (when the kernel has
// Landlock), an empty capability bounding set and the seccomp filter. It
// returns the mechanisms it applied.
func restrictThread(c *Spec) ([]string, error) {
	var mech []string
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("no_new_privs: %w", err)
	}
	mech = append(mech, "no-new-privs")
	// go-landlock's best-effort mode succeeds silently without Landlock, so
	// the ABI is asked for directly and only a real domain is reported.
	if abi, err := llsys.LandlockGetABIVersion(); err == nil && abi > 0 {
		if err := applyLandlock(c); err != nil {
			return nil, fmt.Errorf("landlock: %w", err)
		}
		mech = append(mech, fmt.Sprintf("landlock-abi-%d", abi))
	}
	// Root inside the namespace must not keep capabilities over the
	// sandbox: with an empty bounding set, exec grants none.
	for cp := 0; ; cp++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(cp), 0, 0, 0); err != nil {
			if err == unix.EINVAL && cp > 0 {
				break
			}
			return nil, fmt.Errorf("drop capability %d: %w", cp, err)
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	mech = append(mech, "no-capabilities")
	if f := seccompFilter(); f != nil {
		if err := installSeccomp(f); err != nil {
			return nil, err
		}
		mech = append(mech, "seccomp")
	}
	return mech, nil
}

// applyLandlock restricts the calling thread: read (and execute) access to
// the readable roots (everything without a list), full access to the
// writable roots and the private /tmp and /dev, no TCP without network,
// and no signals or abstract sockets across the domain's boundary.
func applyLandlock(c *Spec) error {
	cfg := landlock.V11.BestEffort()
	if c.Network {
		cfg.HandledAccessNet = 0
	}
	var rules []landlock.Rule
	addRO := func(paths ...string) {
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				rules = append(rules, landlock.ROFiles(p))
			} else {
				rules = append(rules, landlock.RODirs(p).IgnoreIfMissing())
			}
		}
	}
	addRW := func(paths ...string) {
		for _, p := range paths {
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				rules = append(rules, landlock.RWFiles(p).WithIoctlDev())
			} else {
				rules = append(rules, landlock.RWDirs(p).WithRefer().WithIoctlDev().IgnoreIfMissing())
			}
		}
	}
	switch {
	case c.BroadWrite && c.Readable == nil:
		addRW("/")
	case c.BroadWrite:
		addRW(c.Readable...)
	case c.Readable == nil:
		addRO("/")
	default:
		addRO(c.Readable...)
		addRO("/proc")
	}
	if !c.BroadWrite {
		addRW(c.Writable...)
		addRW("/tmp", "/dev")
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return err
	}
	if fd < 0 {
		return nil
	}
	defer unix.Close(fd)
	return llsys.LandlockRestrictSelf(fd, flags)
}
