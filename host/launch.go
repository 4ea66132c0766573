package host

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/internal/sandbox"
)

// launchSpec is a fully resolved launch: everything needed to spawn, and
// nothing that is created at spawn time (pipes, terminals, cgroups).
type launchSpec struct {
	path string   // resolved program path
	args []string // argument vector as given; args[0] is the name shown to the program
	dir  string   // working directory; "" inherits the caller's
	env  []string // complete environment, never nil
	// cmdLine is the exact Windows command line for the shell; "" lets
	// Go quote args.
	cmdLine string
	// conf is the confinement of this launch; nil runs it unconfined.
	conf *sandbox.Spec
	tty  bool
}

// launchRequest is what a caller asks to launch, before anything is
// resolved: exactly one of argv and shell is set.
type launchRequest struct {
	dir      string   // working directory; "" is the caller's
	argv     []string // run literally, without a shell
	shell    string   // run by the platform's command interpreter
	env      []string // KEY=VALUE entries over the base environment
	cleanEnv bool     // start from an empty environment
	tty      bool     // under a pseudo-terminal
	grant    *Grant   // authorizes a gated command; consumed when given
}

// compile resolves a launch without starting anything. The program is
// looked up in the child's PATH, not the caller's. With a policy, the
// command is admitted first (a denied or ungranted command never gets
// further) and the grant, if any, is consumed last, once nothing else can
// fail.
func (e *Executor) compile(req launchRequest) (*launchSpec, error) {
	argv, dir, cmdLine := req.argv, req.dir, ""
	if req.shell != "" || len(argv) == 0 {
		if err := validateShellCommand(req.shell); err != nil {
			return nil, err
		}
		a, l, err := shellArgv(req.shell)
		if err != nil {
			return nil, err
		}
		argv, cmdLine = a, l
	}
	if e.conf != nil {
		d, err := resolveDirectory(dir)
		if err == nil {
			d, err = canonicalPath(d)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: directory: %w", runbox.ErrInvalidCommand, err)
		}
		dir = d
		if err := e.admit(argv, dir, req.grant); err != nil {
			return nil, err
		}
	}
	full := e.environ(req.env, req.cleanEnv, req.tty)
	path, err := lookPath(argv[0], dir, envValue(full, "PATH"))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", runbox.ErrStart, err)
	}
	spec := &launchSpec{
		path:    path,
		args:    slices.Clone(argv),
		dir:     dir,
		env:     full,
		cmdLine: cmdLine,
		tty:     req.tty,
	}
	if e.conf != nil {
		spec.conf = e.conf.newSpawnConf(spec)
	}
	if req.grant != nil {
		if err := e.grants.consume(*req.grant, argv, dir); err != nil {
			return nil, fmt.Errorf("%w: %w", runbox.ErrInvalidCommand, err)
		}
	}
	return spec, nil
}

// admit applies the policy's admission to a normalized command.
func (e *Executor) admit(argv []string, dir string, grant *Grant) error {
	a := AdmissionAllow
	if e.conf.policy.Admit != nil {
		a = e.conf.policy.Admit(slices.Clone(argv), dir)
	}
	switch a {
	case AdmissionAllow:
		return nil
	case AdmissionGated:
		if grant == nil {
			return fmt.Errorf("%w: %w: %q", runbox.ErrInvalidCommand, ErrGrantRequired, argv)
		}
		return nil
	}
	return fmt.Errorf("%w: %w: %q", runbox.ErrInvalidCommand, ErrCommandDenied, argv)
}

// cmd returns a fresh, unstarted exec.Cmd for the spec. Stdio and
// SysProcAttr are filled in by the caller and the platform layer.
func (s *launchSpec) cmd(waitDelay time.Duration) *exec.Cmd {
	return &exec.Cmd{
		Path:      s.path,
		Args:      s.args,
		Dir:       s.dir,
		Env:       s.env,
		WaitDelay: waitDelay,
	}
}

// validateShellCommand checks a command string for the platform shell.
func validateShellCommand(command string) error {
	if strings.TrimSpace(command) == "" {
		return fmt.Errorf("%w: empty shell command", runbox.ErrInvalidCommand)
	}
	if strings.IndexByte(command, 0) >= 0 {
		return fmt.Errorf("%w: shell command contains a NUL byte", runbox.ErrInvalidCommand)
	}
	return nil
}

// windowsShell returns how to run command with cmd.exe from systemDir, the
// directory GetSystemDirectory reports: the interpreter's absolute path, an
// argument vector for display, and the exact command line. The interpreter
// is never looked up in PATH, so a cmd.exe planted in a writable PATH
// directory or the working directory is never run.
//
// /d skips AutoRun commands from the registry, and /s with the outer quotes
// makes cmd.exe run the text between them unchanged. The function is pure
// so that it can be tested on any platform.
func windowsShell(systemDir, command string) (path string, args []string, cmdLine string, err error) {
	dir := strings.TrimRight(systemDir, `\/`)
	if !windowsAbs(dir) {
		return "", nil, "", fmt.Errorf("%w: system directory %q is not an absolute Windows path", runbox.ErrStart, systemDir)
	}
	if strings.ContainsAny(dir, "\"\x00") {
		return "", nil, "", fmt.Errorf("%w: system directory %q contains invalid characters", runbox.ErrStart, systemDir)
	}
	path = dir + `\cmd.exe`
	args = []string{path, "/d", "/s", "/c", command}
	cmdLine = `"` + path + `" /d /s /c "` + command + `"`
	return path, args, cmdLine, nil
}

// windowsAbs reports whether p is a drive-absolute (C:\...) or UNC
// (\\server\share\...) path, independent of the host platform.
func windowsAbs(p string) bool {
	if len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') {
		c := p[0] | 0x20
		return c >= 'a' && c <= 'z'
	}
	return len(p) > 2 && (strings.HasPrefix(p, `\\`) || strings.HasPrefix(p, `//`)) && p[2] != '\\' && p[2] != '/'
}

// resolveDirectory freezes a ProcessOptions.Directory: "" becomes the
// caller's current directory, and the result must be an existing
// directory.
func resolveDirectory(dir string) (string, error) {
	if strings.IndexByte(dir, 0) >= 0 {
		return "", fmt.Errorf("%w: directory contains a NUL byte", runbox.ErrInvalidCommand)
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("%w: current directory: %w", runbox.ErrInvalidCommand, err)
		}
		dir = wd
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("%w: directory: %w", runbox.ErrInvalidCommand, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: directory %q is not a directory", runbox.ErrInvalidCommand, dir)
	}
	return dir, nil
}
