package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/runbox-dev/runbox"
)

// ttySupported: Windows has no pseudo-terminal here (ConPTY is not wired
// in), and pipes must not pretend to be one.
const ttySupported = false

// baseEnvKeys are the variables a child receives from the caller by
// default. Windows programs need more of them than Unix ones to work at
// all (SYSTEMROOT, PATHEXT, the profile directories).
var baseEnvKeys = []string{
	"PATH", "PATHEXT", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC",
	"TEMP", "TMP", "USERPROFILE", "USERNAME", "HOMEDRIVE", "HOMEPATH",
	"APPDATA", "LOCALAPPDATA", "PROGRAMDATA",
}

// envFallback: Windows variables have no portable defaults; os/exec adds
// SYSTEMROOT itself when it is missing.
func envFallback(string) string { return "" }

// envKey normalizes an environment key; Windows keys are case-insensitive.
func envKey(k string) string { return strings.ToUpper(k) }

// shellArgv runs command with cmd.exe from the system directory.
func shellArgv(command string) ([]string, string, error) {
	sys, err := windows.GetSystemDirectory()
	if err != nil {
		return nil, "", fmt.Errorf("%w: system directory: %w", runbox.ErrStart, err)
	}
	_, args, cmdLine, err := windowsShell(sys, command)
	return args, cmdLine, err
}

// lookPath resolves file in the child's PATH (pathEnv), trying the
// caller's PATHEXT extensions. A name with a directory part is taken
// relative to dir. Relative PATH entries are skipped.
func lookPath(file, dir, pathEnv string) (string, error) {
	exts := []string{""}
	if filepath.Ext(file) == "" {
		pe := os.Getenv("PATHEXT")
		if pe == "" {
			pe = ".COM;.EXE;.BAT;.CMD"
		}
		exts = nil
		for _, e := range strings.Split(strings.ToLower(pe), ";") {
			if e != "" {
				exts = append(exts, e)
			}
		}
	}
	find := func(base string) (string, bool) {
		for _, e := range exts {
			if fi, err := os.Stat(base + e); err == nil && fi.Mode().IsRegular() {
				return base + e, true
			}
		}
		return "", false
	}
	if strings.ContainsAny(file, `\/:`) {
		p := file
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if r, ok := find(p); ok {
			return r, nil
		}
		return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(d) {
			continue
		}
		if r, ok := find(filepath.Join(d, file)); ok {
			return r, nil
		}
	}
	return "", &exec.Error{Name: file, Err: exec.ErrNotFound}
}

// treeSys is the Windows handle on a process tree: a kill-on-close job
// object that the process is assigned to while it is still suspended, so
// that neither it nor anything it starts ever runs outside the job.
type treeSys struct {
	job windows.Handle // 0 when no job could be set up
}

func (e *Executor) startTree(spec *launchSpec, build func() *exec.Cmd, tty bool) (*exec.Cmd, *treeSys, error) {
	if tty {
		return nil, nil, runbox.ErrProcessTTYUnsupported
	}
	cmd := build()
	// A new process group keeps the caller's console Ctrl-C away from it,
	// as a new session does on Unix. The process starts suspended: os/exec
	// cannot assign a job at creation, so the job is assigned before its
	// first instruction runs (golang/go#32404).
	cmd.SysProcAttr = &syscall.SysProcAttr{
		CmdLine:       spec.cmdLine,
		CreationFlags: windows.CREATE_NEW_PROCESS_GROUP | windows.CREATE_SUSPENDED,
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	job, jobErr := assignJob(cmd.Process.Pid)
	if jobErr != nil && spec.conf != nil {
		// A confined launch promised enforced teardown: never run it
		// without the job.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("job object: %w", jobErr)
	}
	if err := resumeProcess(uint32(cmd.Process.Pid)); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if job != 0 {
			windows.CloseHandle(job)
		}
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	return cmd, &treeSys{job: job}, nil
}

// resumeProcess resumes every thread of a process created suspended (only
// its main thread exists then). os/exec closes the thread handle that
// CreateProcess returned, so the threads are found by snapshot.
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return err
	}
	defer windows.CloseHandle(snap)
	var te windows.ThreadEntry32
	te.Size = uint32(unsafe.Sizeof(te))
	resumed := 0
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		h, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return err
		}
		_, rerr := windows.ResumeThread(h)
		windows.CloseHandle(h)
		if rerr != nil {
			return rerr
		}
		resumed++
	}
	if resumed == 0 {
		return errors.New("no thread to resume")
	}
	return nil
}

// jobLimits is the job configuration: kill every member when the job is
// terminated or its last handle closes.
func jobLimits() windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION {
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	return info
}

// assignJob puts pid in a new kill-on-close job object.
func assignJob(pid int) (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, err
	}
	info := jobLimits()
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return 0, err
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		windows.CloseHandle(job)
		return 0, err
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		windows.CloseHandle(job)
		return 0, err
	}
	return job, nil
}

// awaitExit waits on a handle of its own; Windows has no reaping, and the
// os.Process handle keeps the pid from being reused until Wait.
func (s *treeSys) awaitExit(p *os.Process) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(p.Pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	_, err = windows.WaitForSingleObject(h, windows.INFINITE)
	return err == nil
}

// signal supports Kill only: Windows has no SIGINT or SIGTERM to send to a
// process that does not share the caller's console.
func (s *treeSys) signal(p *os.Process, sig runbox.ProcessSignal) error {
	if sig != runbox.ProcessSignalKill {
		return fmt.Errorf("%w: %v on windows", runbox.ErrProcessSignalUnsupported, sig)
	}
	var jobErr error
	if s.job != 0 {
		jobErr = windows.TerminateJobObject(s.job, 1)
	}
	if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return errors.Join(jobErr, err)
	}
	return jobErr
}

func (s *treeSys) teardown(*os.Process) error {
	if s.job == 0 {
		return nil
	}
	if err := windows.TerminateJobObject(s.job, 1); err != nil {
		return fmt.Errorf("host: terminate job: %w", err)
	}
	return nil
}

func (s *treeSys) release() error {
	if s.job == 0 {
		return nil
	}
	err := windows.CloseHandle(s.job)
	s.job = 0
	return err
}

// result converts the leader's wait status; nothing wraps it here.
func (s *treeSys) result(state *os.ProcessState) runbox.Result { return exitResult(state) }

func (s *treeSys) containment() runbox.LifetimeContainment {
	if s.job != 0 {
		return runbox.LifetimeContainmentEnforced
	}
	return runbox.LifetimeContainmentUnspecified
}

func (e *Executor) plannedContainment() runbox.LifetimeContainment {
	return runbox.LifetimeContainmentEnforced
}

// probeConfinement: a job object enforces teardown, and the environment is
// scrubbed; Windows has no write, read, network or process boundary here
// (that would take an AppContainer or a restricted token), so a policy
// that implies one fails.
func (e *Executor) probeConfinement() (runbox.Guarantees, error) {
	g := runbox.Guarantees{EnvScrub: !e.cfg.inheritEnv, Lifetime: runbox.LifetimeContainmentEnforced}
	if !e.conf.policy.Unconfined {
		g.Mechanisms = []string{"job-object"}
	}
	return g, nil
}

// execSys: Windows keeps nothing between processes.
type execSys struct{}

func (e *Executor) initSys() {}

// initLimits enforces no limits on Windows (a job object could; it is not
// wired up).
func (e *Executor) initLimits(runbox.Resources) {}
func (e *Executor) closeSys() error             { return nil }

// exitResult converts an exit status; Windows processes have no signals.
func exitResult(state *os.ProcessState) runbox.Result {
	return runbox.Result{ExitCode: state.ExitCode()}
}

func (e *Executor) startPTY(*launchSpec, runbox.TermSize) (*Process, error) {
	return nil, runbox.ErrProcessTTYUnsupported
}

func resizePTY(*os.File, runbox.TermSize) error { return runbox.ErrProcessTTYUnsupported }

// growPipe: Windows pipes keep their default size.
func growPipe(*os.File) {}
