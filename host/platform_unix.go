//go:build unix

package host

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/execpath"
)

// ttySupported reports whether PrepareProcess accepts TTY.
const ttySupported = true

// defaultPath is the child's PATH when the caller has none, and the search
// path when a child environment has no PATH (as execvp does).
const defaultPath = execpath.DefaultPath

// baseEnvKeys are the variables a child receives from the caller by
// default.
var baseEnvKeys = []string{"PATH", "HOME", "TMPDIR", "LANG", "USER"}

// envFallback supplies a base variable the caller does not have.
func envFallback(key string) string {
	switch key {
	case "PATH":
		return defaultPath
	case "HOME":
		if u := currentUser(); u != nil && u.HomeDir != "" {
			return u.HomeDir
		}
		return "/"
	case "TMPDIR":
		return "/tmp"
	case "LANG":
		if runtime.GOOS == "darwin" {
			return "en_US.UTF-8"
		}
		return "C.UTF-8"
	case "USER":
		if u := currentUser(); u != nil {
			return u.Username
		}
	case "TERM":
		return "xterm"
	}
	return ""
}

// envKey normalizes an environment key for comparison; Unix keys are case
// sensitive.
func envKey(k string) string { return k }

// shellArgv runs command with /bin/sh -c.
func shellArgv(command string) ([]string, string, error) {
	return []string{"/bin/sh", "-c", command}, "", nil
}

// lookPath resolves file in the child's PATH (see execpath.Look).
func lookPath(file, dir, pathEnv string) (string, error) {
	return execpath.Look(file, dir, pathEnv)
}

// unixSignal maps a portable signal to the Unix one.
func unixSignal(sig runbox.ProcessSignal) (syscall.Signal, error) {
	switch sig {
	case runbox.ProcessSignalInterrupt:
		return unix.SIGINT, nil
	case runbox.ProcessSignalTerminate:
		return unix.SIGTERM, nil
	case runbox.ProcessSignalKill:
		return unix.SIGKILL, nil
	}
	return 0, fmt.Errorf("%w: %v", runbox.ErrProcessSignalUnsupported, sig)
}

// killGroup signals the process group led by pid. A group that no longer
// exists has nothing left to signal.
func killGroup(pid int, sig syscall.Signal) error {
	if err := unix.Kill(-pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("host: signal %v to process group %d: %w", sig, pid, err)
	}
	return nil
}

// exitResult converts a wait status. A signal death is reported the way
// shells do, 128+N, with the signal's name.
func exitResult(state *os.ProcessState) runbox.Result {
	ws, ok := state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		sig := ws.Signal()
		name := unix.SignalName(sig)
		if name == "" {
			name = fmt.Sprintf("signal %d", int(sig))
		}
		return runbox.Result{ExitCode: 128 + int(sig), Signal: name}
	}
	return runbox.Result{ExitCode: state.ExitCode()}
}

// sysProcAttr puts the child in a new session, which also makes it the
// leader of a new process group, so that the tree can be signalled as a
// group. With a terminal, the slave (the child's fd 0) becomes the
// session's controlling terminal; exactly what pty.Start would set, done
// here once because we call cmd.Start ourselves.
func sysProcAttr(tty bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true}
	if tty {
		a.Setctty = true
		a.Ctty = 0
	}
	return a
}

// startPTY spawns spec with a new pseudo-terminal as stdin, stdout and
// stderr.
func (e *Executor) startPTY(spec *launchSpec, size runbox.TermSize) (*Process, error) {
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: pseudo-terminal: %w", runbox.ErrStart, err)
	}
	master, err = pollableMaster(master)
	if err != nil {
		slave.Close()
		return nil, fmt.Errorf("%w: pseudo-terminal: %w", runbox.ErrStart, err)
	}
	if err := resizePTY(master, size); err != nil {
		closeFiles(master, slave)
		return nil, fmt.Errorf("%w: pseudo-terminal size: %w", runbox.ErrStart, err)
	}
	build := func() *exec.Cmd {
		c := spec.cmd(e.cfg.waitDelay)
		c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
		return c
	}
	p, err := e.spawn(spec, build, true)
	// Only the child may hold the slave: the master reads EOF (EIO) once the
	// last process using the terminal is gone.
	slave.Close()
	if err != nil {
		master.Close()
		return nil, err
	}
	return &Process{
		p:      p,
		mode:   runbox.ProcessStreamModePTY,
		stdin:  &stdinWriter{f: master, tty: true},
		stdout: ptyReader{master},
		stderr: eofReader{},
		master: master,
		files:  []*os.File{master},
	}, nil
}

// resizePTY sets the terminal size through the master. It goes through
// SyscallConn rather than pty.Setsize, whose Fd call would switch the
// master back to blocking mode.
func resizePTY(master *os.File, size runbox.TermSize) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	ws := &unix.Winsize{Row: size.Rows, Col: size.Cols}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws)
	}); err != nil {
		return err
	}
	return ioErr
}

// ptyReader reads the master side. Linux reports a terminal whose every
// slave descriptor is closed with EIO; that is end-of-file here.
type ptyReader struct{ f *os.File }

func (r ptyReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if err != nil && errors.Is(err, syscall.EIO) {
		err = io.EOF
	}
	return n, err
}
