package agent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Main runs the agent's command line and returns the exit status:
//
//	agent init --socket PATH -- PROCESS...   be PID 1: run PROCESS, serve commands
//	agent connect --socket PATH              bridge stdin/stdout to the socket
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "runbox agent: want init or connect")
		return 2
	}
	fs := flag.NewFlagSet("agent "+args[0], flag.ContinueOnError)
	socket := fs.String("socket", DefaultSocket, "unix socket path")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch args[0] {
	case "init":
		return runInit(*socket, fs.Args())
	case "connect":
		return runConnect(*socket)
	}
	fmt.Fprintf(os.Stderr, "runbox agent: unknown mode %q\n", args[0])
	return 2
}

// runConnect copies between stdio and the agent's socket; a remote Engine
// reaches the agent through an exec of this.
func runConnect(socket string) int {
	c, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbox agent connect:", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(os.Stdout, c)
		close(done)
	}()
	_, _ = io.Copy(c, os.Stdin)
	_ = c.(*net.UnixConn).CloseWrite()
	<-done
	return 0
}

// runInit is the agent as PID 1.
func runInit(socket string, process []string) int {
	if len(process) == 0 {
		fmt.Fprintln(os.Stderr, "runbox agent init: no lifetime process")
		return 2
	}
	// Orphans of commands become ours to reap even if we are not PID 1
	// (for example under the Engine's own init).
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

	s := &server{waiters: map[int]chan unix.WaitStatus{}}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs) // everything: SIGCHLD to reap, the rest to forward
	lifetime, err := s.startLifetime(process)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbox agent init:", err)
		return 127
	}
	ln, err := listen(socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbox agent init:", err)
		_ = unix.Kill(-lifetime, unix.SIGKILL)
		return 1
	}
	go s.serve(ln)

	for sig := range sigs {
		if sig == unix.SIGCHLD {
			if st, done := s.reap(lifetime); done {
				return exitStatus(st)
			}
			continue
		}
		if sig == unix.SIGURG || sig == unix.SIGPIPE {
			continue // runtime preemption and broken connections
		}
		// Forward to the lifetime process: PID 1 gets no default actions.
		_ = unix.Kill(lifetime, sig.(syscall.Signal))
	}
	return 0
}

// DefaultSocket is where the agent listens inside a session.
const DefaultSocket = "/dev/.runbox/run/agent.sock"

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// The socket is reachable only by whoever can reach its directory.
	_ = os.Chmod(path, 0o777)
	return ln, nil
}

func exitStatus(st unix.WaitStatus) int {
	if st.Signaled() {
		return 128 + int(st.Signal())
	}
	return st.ExitStatus()
}

type server struct {
	mu      sync.Mutex // held across spawn+register so the reaper cannot miss a child
	waiters map[int]chan unix.WaitStatus
}

// startLifetime starts the session's own process with the agent's stdio.
func (s *server) startLifetime(argv []string) (int, error) {
	path, err := lookPath(argv[0], os.Environ())
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release() // the reaper waits for it, not os.Process
	return pid, nil
}

// reap collects every exited child, hands command statuses to their
// waiters, and reports the lifetime process's end.
func (s *server) reap(lifetime int) (unix.WaitStatus, bool) {
	var lifetimeStatus unix.WaitStatus
	ended := false
	for {
		var st unix.WaitStatus
		pid, err := unix.Wait4(-1, &st, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return lifetimeStatus, ended
		}
		if pid == lifetime {
			lifetimeStatus, ended = st, true
			continue
		}
		s.mu.Lock()
		if ch, ok := s.waiters[pid]; ok {
			ch <- st
			delete(s.waiters, pid)
		}
		s.mu.Unlock()
	}
}

func (s *server) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

// conn is one client connection and the commands it started.
type conn struct {
	s    *server
	c    net.Conn
	wmu  sync.Mutex
	cmds sync.Map // uint32 -> *command
}

func (c *conn) send(f Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteFrame(c.c, f)
}

func (c *conn) sendJSON(t Type, id uint32, v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return WriteJSON(c.c, t, id, v)
}

func (s *server) handle(nc net.Conn) {
	c := &conn{s: s, c: nc}
	defer func() {
		// A client that is gone cannot collect results: its commands die.
		c.cmds.Range(func(_, v any) bool {
			v.(*command).kill(unix.SIGKILL)
			return true
		})
		nc.Close()
	}()
	r := NewReader(nc)
	f, err := r.Next()
	if err != nil || f.Type != TypeHello {
		_ = c.sendJSON(TypeError, 0, Fatal{Error: "expected hello"})
		return
	}
	var h Hello
	if err := Decode(f, &h); err != nil || h.Version != Version {
		_ = c.sendJSON(TypeError, 0, Fatal{Error: fmt.Sprintf("unsupported protocol version %d", h.Version)})
		return
	}
	if err := c.sendJSON(TypeHello, 0, Hello{Version: Version, Pid: os.Getpid()}); err != nil {
		return
	}
	for {
		f, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = c.sendJSON(TypeError, 0, Fatal{Error: err.Error()})
			}
			return
		}
		if err := c.dispatch(f); err != nil {
			_ = c.sendJSON(TypeError, 0, Fatal{Error: err.Error()})
			return
		}
	}
}

func (c *conn) dispatch(f Frame) error {
	if f.Type == TypeStart {
		var req StartRequest
		if err := Decode(f, &req); err != nil {
			return err
		}
		if _, loaded := c.cmds.Load(f.ID); loaded || f.ID == 0 {
			return fmt.Errorf("%w: command id %d reused", ErrProtocol, f.ID)
		}
		if err := c.sendJSON(TypeAccepted, f.ID, struct{}{}); err != nil {
			return err
		}
		c.start(f.ID, req)
		return nil
	}
	v, ok := c.cmds.Load(f.ID)
	if !ok {
		return nil // the command already ended; late input is dropped
	}
	cmd := v.(*command)
	switch f.Type {
	case TypeStdin:
		cmd.writeStdin(append([]byte(nil), f.Payload...))
	case TypeStdinEOF:
		cmd.closeStdin()
	case TypeResize:
		var rs Resize
		if err := Decode(f, &rs); err != nil {
			return err
		}
		if cmd.tty != nil {
			_ = pty.Setsize(cmd.tty, &pty.Winsize{Rows: rs.Rows, Cols: rs.Cols})
		}
	case TypeSignal:
		var sg Signal
		if err := Decode(f, &sg); err != nil {
			return err
		}
		cmd.kill(unix.Signal(sg.Signal))
	case TypeCancel:
		cmd.kill(unix.SIGKILL)
	default:
		return fmt.Errorf("%w: unexpected %s frame from the client", ErrProtocol, f.Type)
	}
	return nil
}

// command is one started process.
type command struct {
	pid   int
	stdin *os.File // the pipe to the command, or the pty master
	tty   *os.File // the pty master, when there is one

	inmu   sync.Mutex
	incond *sync.Cond
	inq    [][]byte
	inEOF  bool // the client sent stdin-eof
	inDone bool // the command ended: drop input
}

func newCommand() *command {
	cmd := &command{}
	cmd.incond = sync.NewCond(&cmd.inmu)
	return cmd
}

func (cmd *command) kill(sig unix.Signal) {
	// The command leads its own process group (or session, with a tty).
	_ = unix.Kill(-cmd.pid, sig)
}

// writeStdin queues input; it never blocks the connection, because the
// client keeps within its StdinWindow.
func (cmd *command) writeStdin(b []byte) {
	cmd.inmu.Lock()
	defer cmd.inmu.Unlock()
	if !cmd.inDone {
		cmd.inq = append(cmd.inq, b)
		cmd.incond.Signal()
	}
}

func (cmd *command) closeStdin() {
	cmd.inmu.Lock()
	defer cmd.inmu.Unlock()
	cmd.inEOF = true
	cmd.incond.Signal()
}

func (cmd *command) stopStdin() {
	cmd.inmu.Lock()
	defer cmd.inmu.Unlock()
	cmd.inDone, cmd.inq = true, nil
	cmd.incond.Signal()
}

// pumpStdin writes queued input to the command and acknowledges it, then
// closes the command's stdin at EOF (a terminal has no end of file: input
// just stops). Input the command no longer takes is acknowledged and
// dropped.
func (cmd *command) pumpStdin(c *conn, id uint32) {
	broken := false
	for {
		cmd.inmu.Lock()
		for len(cmd.inq) == 0 && !cmd.inEOF && !cmd.inDone {
			cmd.incond.Wait()
		}
		if cmd.inDone || (len(cmd.inq) == 0 && cmd.inEOF) {
			done := cmd.inDone
			cmd.inmu.Unlock()
			if !done && cmd.tty == nil {
				cmd.stdin.Close()
			}
			return
		}
		b := cmd.inq[0]
		cmd.inq = cmd.inq[1:]
		cmd.inmu.Unlock()
		if !broken {
			if _, err := cmd.stdin.Write(b); err != nil {
				broken = true
			}
		}
		_ = c.sendJSON(TypeStdinAck, id, StdinAck{Bytes: len(b)})
	}
}

// start launches a command and streams it until its exit has been sent.
func (c *conn) start(id uint32, req StartRequest) {
	// Never nil: os.StartProcess would read a nil Env as "inherit mine".
	env := append([]string{}, req.Env...)
	if !req.CleanEnv {
		env = mergeEnv(os.Environ(), req.Env)
	}
	fail := func(err error) { _ = c.sendJSON(TypeStartFailed, id, StartFailed{Error: err.Error()}) }
	if len(req.Args) == 0 {
		fail(errors.New("empty argument vector"))
		return
	}
	path, err := lookPath(req.Args[0], env)
	if err != nil {
		fail(err)
		return
	}
	if req.Dir != "" {
		if fi, err := os.Stat(req.Dir); err != nil {
			fail(fmt.Errorf("working directory: %w", err))
			return
		} else if !fi.IsDir() {
			fail(fmt.Errorf("working directory %s is not a directory", req.Dir))
			return
		}
	}

	var childFiles, parentEnds []*os.File
	var stdout, stderr *os.File
	cmd := newCommand()
	sys := &syscall.SysProcAttr{Setpgid: true}
	if req.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			fail(err)
			return
		}
		if req.Rows > 0 && req.Cols > 0 {
			_ = pty.Setsize(master, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
		}
		childFiles = []*os.File{slave, slave, slave}
		cmd.tty, cmd.stdin, stdout = master, master, master
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		parentEnds = []*os.File{master}
	} else {
		inR, inW, err1 := os.Pipe()
		outR, outW, err2 := os.Pipe()
		errR, errW, err3 := os.Pipe()
		if err := errors.Join(err1, err2, err3); err != nil {
			fail(err)
			return
		}
		// Bigger pipes mean fewer, fuller frames for a fast writer.
		_, _ = unix.FcntlInt(outR.Fd(), unix.F_SETPIPE_SZ, 1<<20)
		_, _ = unix.FcntlInt(errR.Fd(), unix.F_SETPIPE_SZ, 1<<20)
		childFiles = []*os.File{inR, outW, errW}
		cmd.stdin, stdout, stderr = inW, outR, errR
		parentEnds = []*os.File{inW, outR, errR}
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}

	status := make(chan unix.WaitStatus, 1)
	c.s.mu.Lock()
	p, err := os.StartProcess(path, req.Args, &os.ProcAttr{Dir: req.Dir, Env: env, Files: childFiles, Sys: sys})
	if err == nil {
		cmd.pid = p.Pid
		c.s.waiters[p.Pid] = status
		_ = p.Release()
	}
	c.s.mu.Unlock()
	closeAll(uniq(childFiles))
	if err != nil {
		closeAll(parentEnds)
		fail(err)
		return
	}
	c.cmds.Store(id, cmd)
	_ = c.sendJSON(TypeStarted, id, Started{Pid: cmd.pid})

	go cmd.pumpStdin(c, id)
	var outputs sync.WaitGroup
	pump := func(f *os.File, t Type) {
		defer outputs.Done()
		bp := pumpBuffers.Get().(*[]byte)
		defer pumpBuffers.Put(bp)
		buf := *bp
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if c.send(Frame{Type: t, ID: id, Payload: buf[:n]}) != nil {
					cmd.kill(unix.SIGKILL)
				}
			}
			if err != nil {
				return // EOF, or EIO once a terminal's last holder closed it
			}
		}
	}
	outputs.Add(1)
	go pump(stdout, TypeStdout)
	if stderr != nil {
		outputs.Add(1)
		go pump(stderr, TypeStderr)
	}
	go func() {
		st := <-status
		outputs.Wait()
		cmd.stopStdin()
		closeAll(parentEnds)
		c.cmds.Delete(id)
		ex := Exit{Code: st.ExitStatus()}
		if st.Signaled() {
			ex = Exit{Code: 128 + int(st.Signal()), Signal: unix.SignalName(st.Signal())}
		}
		_ = c.sendJSON(TypeExit, id, ex)
	}()
}

// pumpBuffers recycles output buffers: two per command would otherwise be
// allocated for every `true`.
var pumpBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func uniq(fs []*os.File) []*os.File {
	var out []*os.File
	seen := map[*os.File]bool{}
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// mergeEnv applies extra KEY=VALUE entries over base.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	idx := map[string]int{}
	for _, kv := range append(append([]string(nil), base...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// defaultPath is searched when the environment has no PATH, as execvp does.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath resolves a program name against the command's own PATH.
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, checkExecutable(file)
	}
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("exec: %s: permission denied", p)
	}
	return nil
}
