package main

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/spf13/pflag"

	"github.com/runbox-dev/runbox"
)

// openFlags are the session-shaping flags of open and run.
type openFlags struct {
	network  string
	volumes  []string
	env      []string
	envFiles []string
	labels   []string
	memory   string
	cpus     float64
	pids     int64
	name     string
	user     string
	init     bool
	pull     string
	platform string
	workdir  string
	hard     hardenFlags
}

// hardenFlags are the runtime and hardening flags, with docker's spellings.
type hardenFlags struct {
	runtime     string
	capDrop     []string
	capAdd      []string
	securityOpt []string
	readOnly    bool
	tmpfs       []string
}

func (f *hardenFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.runtime, "runtime", "", "OCI runtime the Engine knows, e.g. runsc (gVisor); default: the Engine's")
	fs.StringArrayVar(&f.capDrop, "cap-drop", nil, "drop a capability, or ALL (repeatable)")
	fs.StringArrayVar(&f.capAdd, "cap-add", nil, "add a capability, after --cap-drop (repeatable)")
	fs.StringArrayVar(&f.securityOpt, "security-opt", nil, "security option; runbox knows no-new-privileges")
	fs.BoolVar(&f.readOnly, "read-only", false, "make the root filesystem read-only")
	fs.StringArrayVar(&f.tmpfs, "tmpfs", nil, "mount a tmpfs at DST[:OPTIONS], e.g. /tmp:size=64m (repeatable)")
}

// apply puts the flags into spec.
func (f *hardenFlags) apply(spec *runbox.Spec) error {
	spec.Runtime = f.runtime
	sec := runbox.Security{CapDrop: f.capDrop, CapAdd: f.capAdd, ReadOnlyRootfs: f.readOnly}
	for _, o := range f.securityOpt {
		switch o {
		case "no-new-privileges", "no-new-privileges:true", "no-new-privileges=true":
			sec.NoNewPrivileges = true
		default:
			return fmt.Errorf("%w: --security-opt %q: runbox supports no-new-privileges only", runbox.ErrInvalidSpec, o)
		}
	}
	for _, t := range f.tmpfs {
		dst, opts, _ := strings.Cut(t, ":")
		sec.Tmpfs = append(sec.Tmpfs, runbox.Tmpfs{Target: dst, Options: opts})
	}
	spec.Security = sec
	return nil
}

func (f *openFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.network, "network", "none", "network: none, bridge, or the name of an existing Engine network")
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "bind mount SRC:DST[:ro]; SRC is an absolute path on the Engine's host")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment entry K=V for the session, or K for this shell's value of K (repeatable)")
	fs.StringArrayVar(&f.envFiles, "env-file", nil, "read environment entries from a file of K=V or K lines (# starts a comment)")
	fs.StringArrayVar(&f.labels, "label", nil, "label K=V for the session's container (repeatable)")
	fs.StringVar(&f.memory, "memory", "", "memory limit in bytes, or with a unit: 512m, 2g")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPUs the session may use, e.g. 1.5")
	fs.Int64Var(&f.pids, "pids-limit", 0, "maximum number of processes (docker's spelling of --pids)")
	fs.Int64Var(&f.pids, "pids", 0, "maximum number of processes")
	fs.StringVar(&f.name, "name", "", "session name, usable wherever a session ID is")
	fs.StringVarP(&f.user, "user", "u", "", "user for the lifetime process and commands (uid[:gid] or name)")
	fs.BoolVar(&f.init, "init", false, "run an init as PID 1 that reaps orphans and forwards signals")
	f.hard.register(fs)
	fs.StringVar(&f.pull, "pull", pullMissing, "pull the image: missing (when absent), always, or never")
	fs.StringVar(&f.platform, "platform", "", "the image's platform as OS/ARCH[/VARIANT]; pulled when the local image is of another")
}

// spec builds and validates the session Spec. Nothing is created when it
// fails.
func (f *openFlags) spec(image string, process []string) (runbox.Spec, error) {
	env, err := resolveEnv(f.env, f.envFiles)
	if err != nil {
		return runbox.Spec{}, err
	}
	spec := runbox.Spec{
		Image:   image,
		Network: runbox.NetworkPolicy(f.network),
		Process: process,
		Name:    f.name,
		User:    f.user,
		Init:    f.init,
		Env:     env,
		Dir:     f.workdir,
	}
	for _, v := range f.volumes {
		m, err := parseVolume(v)
		if err != nil {
			return spec, err
		}
		spec.Mounts = append(spec.Mounts, m)
	}
	if len(f.labels) > 0 {
		spec.Labels = map[string]string{}
		for _, l := range f.labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok || k == "" {
				return spec, fmt.Errorf("%w: --label %q is not K=V", runbox.ErrInvalidSpec, l)
			}
			spec.Labels[k] = v
		}
	}
	if f.memory != "" {
		n, err := units.RAMInBytes(f.memory)
		if err != nil {
			return spec, fmt.Errorf("%w: --memory %q: %w", runbox.ErrInvalidSpec, f.memory, err)
		}
		spec.Resources.MemoryBytes = n
	}
	spec.Resources.CPUs = f.cpus
	spec.Resources.Pids = f.pids
	if err := f.hard.apply(&spec); err != nil {
		return spec, err
	}
	if err := runbox.ValidateEnv(env); err != nil {
		return spec, fmt.Errorf("%w: -e: %w", runbox.ErrInvalidSpec, err)
	}
	return spec, spec.Validate()
}

// parseVolume parses SRC:DST[:ro|rw]. SRC must be absolute; whether it
// exists is the library's to check, on the Engine's host.
func parseVolume(v string) (runbox.Mount, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return runbox.Mount{}, fmt.Errorf("%w: -v %q is not SRC:DST[:ro]", runbox.ErrInvalidSpec, v)
	}
	m := runbox.Mount{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return runbox.Mount{}, fmt.Errorf("%w: -v %q: mode must be ro or rw", runbox.ErrInvalidSpec, v)
		}
	}
	if m.Source == "" || !filepath.IsAbs(m.Source) {
		return runbox.Mount{}, fmt.Errorf("%w: -v %q: the source must be an absolute host path", runbox.ErrInvalidSpec, v)
	}
	if m.Target == "" {
		return runbox.Mount{}, fmt.Errorf("%w: -v %q: no target", runbox.ErrInvalidSpec, v)
	}
	return m, m.Validate()
}

// execFlags shape one command.
type execFlags struct {
	interactive bool
	tty         bool
	env         []string
	envFiles    []string
	cleanEnv    bool
	dir         string
	timeout     string
	outputLimit int64
	user        string
}

// registerUser adds -u/--user (exec; run's -u shapes the session).
func (f *execFlags) registerUser(fs *pflag.FlagSet) {
	fs.StringVarP(&f.user, "user", "u", "", "run the command as USER[:GROUP] (names or numbers known to the session)")
}

// registerOutputLimit adds --output-limit (exec and run; host has its own).
func (f *execFlags) registerOutputLimit(fs *pflag.FlagSet) {
	fs.Int64Var(&f.outputLimit, "output-limit", 0, "stop the command once stdout and stderr together pass this many bytes; exit status 125")
}

// limit returns the --output-limit, refusing a negative one.
func (f *execFlags) limit() (int64, error) {
	if f.outputLimit < 0 {
		return 0, fmt.Errorf("%w: --output-limit must be positive, got %d", runbox.ErrInvalidCommand, f.outputLimit)
	}
	return f.outputLimit, nil
}

func (f *execFlags) register(fs *pflag.FlagSet, withEnv bool) {
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "connect this terminal's stdin to the command (EOF reaches it)")
	fs.BoolVarP(&f.tty, "tty", "t", false, "run the command under a pseudo-terminal")
	if withEnv {
		fs.StringArrayVarP(&f.env, "env", "e", nil, "environment entry K=V added for the command, or K for this shell's value of K (repeatable)")
		fs.StringArrayVar(&f.envFiles, "env-file", nil, "read environment entries from a file of K=V or K lines (# starts a comment)")
	}
	fs.BoolVar(&f.cleanEnv, "clean-env", false, "start from an empty environment: only -e entries are set")
	fs.StringVarP(&f.dir, "workdir", "w", "", "working directory of the command")
	fs.StringVar(&f.timeout, "timeout", "", "stop waiting after this long (e.g. 30s, 5m); exit status 124")
}

// parseTimeout returns 0 for no timeout. A number is seconds. Anything
// that is not a positive duration a time.Duration can hold is refused:
// converting an infinite or huge number overflows to a negative duration,
// and a tiny one rounds to zero, and either would mean "no timeout".
func (f *execFlags) parseTimeout() (time.Duration, error) {
	if f.timeout == "" {
		return 0, nil
	}
	bad := fmt.Errorf("%w: --timeout %q is not a positive duration like 30s or 5m (at most %s)", runbox.ErrInvalidCommand, f.timeout, time.Duration(math.MaxInt64))
	if d, err := time.ParseDuration(f.timeout); err == nil {
		if d <= 0 {
			return 0, bad
		}
		return d, nil
	}
	secs, err := strconv.ParseFloat(f.timeout, 64)
	if err != nil {
		return 0, bad
	}
	ns := secs * float64(time.Second)
	// float64(math.MaxInt64) is 2^63, one past the largest Duration.
	if math.IsNaN(ns) || ns < 1 || ns >= float64(math.MaxInt64) {
		return 0, bad
	}
	return time.Duration(ns), nil
}

func (f *execFlags) command(args []string) (runbox.Command, error) {
	env, err := resolveEnv(f.env, f.envFiles)
	if err != nil {
		return runbox.Command{}, err
	}
	cmd := runbox.Command{Args: args, Dir: f.dir, Env: env, CleanEnv: f.cleanEnv, TTY: f.tty, User: f.user}
	if f.interactive {
		cmd.Stdin = os.Stdin
	}
	return cmd, cmd.Validate()
}

// sessionCommand is command for a session: the working directory must be
// absolute (a session has no current directory to be relative to), and a
// terminal gets TERM as docker gives it.
func (f *execFlags) sessionCommand(args []string) (runbox.Command, error) {
	cmd, err := f.command(args)
	if err != nil {
		return cmd, err
	}
	return cmd, forSession(&cmd)
}

// forSession applies the session rules of sessionCommand to cmd.
func forSession(cmd *runbox.Command) error {
	if cmd.Dir != "" && !path.IsAbs(cmd.Dir) {
		return fmt.Errorf("%w: the working directory %q is not an absolute path", runbox.ErrInvalidCommand, cmd.Dir)
	}
	if cmd.TTY && envValue(cmd.Env, "TERM") == nil {
		term := os.Getenv("TERM")
		if term == "" {
			term = "xterm"
		}
		cmd.Env = append([]string{"TERM=" + term}, cmd.Env...)
	}
	return nil
}

// envValue returns the value of key in env (the last entry wins), or nil.
func envValue(env []string, key string) *string {
	var v *string
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = &val
		}
	}
	return v
}

// resolveEnv reads the --env-file files, then the -e entries, as docker
// does: an entry K without "=" takes this process's value of K and is
// dropped when K is not set here.
func resolveEnv(entries, files []string) ([]string, error) {
	var all []string
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("%w: --env-file: %w", runbox.ErrInvalidCommand, err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, "=") {
				return nil, fmt.Errorf("%w: --env-file %s:%d: no variable name", runbox.ErrInvalidCommand, name, i+1)
			}
			all = append(all, line)
		}
	}
	all = append(all, entries...)
	out := make([]string, 0, len(all))
	for _, e := range all {
		if strings.Contains(e, "=") {
			out = append(out, e)
		} else if v, ok := os.LookupEnv(e); ok {
			out = append(out, e+"="+v)
		}
	}
	return out, nil
}

// registerWorkdir adds open's -w: the session's working directory (run's
// -w is the command's, as exec's).
func (f *openFlags) registerWorkdir(fs *pflag.FlagSet) {
	fs.StringVarP(&f.workdir, "workdir", "w", "", "working directory of the lifetime process and of commands that name none (absolute)")
}
