package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/reexec"
)

// The protocol between the executor and its stage-2 helper: the helper is
// started with ProcAttr and reexec.Env=Name, the spec (SpecFile) on fd 3,
// the write end of a status pipe on StatusFD, then cgroup v1 task files
// (Spec.LimitFDs) and, for a prepared sandbox, its control socket
// (Spec.ControlFD). It reports on the status pipe: first AwaitReport,
// then, when the command ends, ReadResult.

// Name is the helper name [runbox.Init] dispatches to: a program
// started with reexec.Env set to it runs the stage-2 helper.
const Name = "host-sandbox"

func init() { reexec.Register(Name, stage2Main) }

// startTimeout bounds how long AwaitReport waits for the helper to report
// that the command runs. Setting up takes milliseconds; this only catches a
// helper that hangs.
const startTimeout = 30 * time.Second

// Status messages from the helper on its status descriptor (StatusFD):
// one byte of kind, a 4-byte big-endian length, the payload.
const (
	statusRunning = 'R' // the command was executed
	statusProbe   = 'P' // probe or prepared: payload is the JSON list of mechanisms
	statusError   = 'E' // setup failed: payload is the message
	statusExit    = 'X' // payload: 4-byte exit code
	statusSignal  = 'S' // payload: 4-byte signal number
)

func writeStatus(w io.Writer, kind byte, payload []byte) error {
	b := make([]byte, 5+len(payload))
	b[0] = kind
	binary.BigEndian.PutUint32(b[1:5], uint32(len(payload)))
	copy(b[5:], payload)
	_, err := w.Write(b)
	return err
}

// maxStatusPayload bounds a message so that a broken helper cannot make the
// parent allocate without limit.
const maxStatusPayload = 1 << 16

// readStatus reads one status message from the helper.
func readStatus(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxStatusPayload {
		return 0, nil, fmt.Errorf("helper status of %d bytes", n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

// ErrHelperGone reports that the helper's status pipe ended, or stayed
// silent for startTimeout, without a report: the helper died or hung
// before it ran the command.
var ErrHelperGone = errors.New("sandbox helper ended before running the command")

// AwaitReport waits, at most startTimeout, for the helper's first report
// on status: that the command runs, or (when probe allows it, for a probe
// or a prepared sandbox being built) the JSON list of the mechanisms it
// applied, which it returns. A setup failure is returned as the helper's
// message; a helper that ended without a report as ErrHelperGone.
func AwaitReport(status *os.File, probe bool) ([]byte, error) {
	_ = status.SetReadDeadline(time.Now().Add(startTimeout))
	kind, payload, err := readStatus(status)
	_ = status.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrHelperGone, err)
	case kind == statusRunning, probe && kind == statusProbe:
		return payload, nil
	case kind == statusError:
		return nil, fmt.Errorf("sandbox: %s", payload)
	}
	return nil, fmt.Errorf("sandbox helper sent unexpected status %q", kind)
}

// ReadResult reads the command's outcome that the helper reports when the
// command ends: its exit code, or the signal that ended it (as 128+N, the
// way a shell reports it). ok is false when the helper reported nothing,
// because it was killed, for example.
func ReadResult(status io.Reader) (res runbox.Result, ok bool) {
	kind, p, err := readStatus(status)
	if err != nil || len(p) != 4 {
		return runbox.Result{}, false
	}
	n := int(binary.BigEndian.Uint32(p))
	switch kind {
	case statusExit:
		return runbox.Result{ExitCode: n}, true
	case statusSignal:
		name := unix.SignalName(syscall.Signal(n))
		if name == "" {
			name = fmt.Sprintf("signal %d", n)
		}
		return runbox.Result{ExitCode: 128 + n, Signal: name}, true
	}
	return runbox.Result{}, false
}

// ProcAttr starts the helper as the init of new user, mount, PID
// and IPC namespaces (and a network namespace unless the network is
// allowed), mapping the caller's uid and gid to root inside, which gives it
// the capabilities it needs there to build the sandbox, and nothing
// outside.
func ProcAttr(network bool, cgroupFD int) *syscall.SysProcAttr {
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC)
	if !network {
		flags |= unix.CLONE_NEWNET
	}
	a := &syscall.SysProcAttr{
		// The helper leads a session of its own; the command gets another
		// one (and the terminal) inside.
		Setsid:      true,
		Pdeathsig:   syscall.SIGKILL,
		Cloneflags:  flags,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if cgroupFD >= 0 {
		a.UseCgroupFD = true
		a.CgroupFD = cgroupFD
	}
	return a
}

// SpecFile returns conf as JSON in a sealed memory file for the helper's
// descriptor (fd 3): no size limit, nothing on disk, nothing in the environment.
func SpecFile(conf *Spec) (*os.File, error) {
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("runbox-sandbox-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "runbox-sandbox-spec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// errHelperNoCommand is reported when a helper spec has no program.
var errHelperNoCommand = errors.New("no program to run")
