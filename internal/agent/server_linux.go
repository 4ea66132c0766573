package agent

import (
	"bytes"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/creack/pty"

	"github.com/runbox-dev/runbox/internal/execpath"
	"golang.org/x/sys/unix"
)

// Main runs the agent's command line and returns the exit status:
//
//	agent init --dial DIR -- PROCESS...
//	    be PID 1: run PROCESS, and serve every caller that listens on a
//	    socket created in DIR (a directory the session can only read)
//	agent init --socket PATH --key-file FILE -- PROCESS...
//	    be PID 1: run PROCESS, listen on PATH, and serve only callers that
//	    prove the key read (and removed) from FILE
//	agent connect --socket PATH
//	    bridge stdin/stdout to the socket (a remote Engine's way in)
//	agent copy-in DEST NAME dir|file
//	agent copy-out SRC
//	    a session's files as a tar stream on stdin or stdout (run by the
//	    agent as a command: see files_linux.go)
func Main(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "runbox agent: want init or connect")
		return 2
	}
	// Nothing in the session may read or trace the agent (or its file
	// helpers): without CAP_SYS_PTRACE even root there cannot open
	// /proc/PID/{mem,environ,fd} of a process that is not dumpable.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	switch args[0] {
	case "copy-in":
		return copyIn(args[1:])
	case "copy-out":
		return copyOut(args[1:])
	}
	fs := flag.NewFlagSet("agent "+args[0], flag.ContinueOnError)
	socket := fs.String("socket", DefaultSocket, "unix socket path")
	dial := fs.String("dial", "", "directory of caller sockets to dial")
	keyFile := fs.String("key-file", "", "file holding the session key; removed once read")
	lease := fs.Duration("lease", 0, "end the session when no caller renewed it for this long (0: never)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch args[0] {
	case "init":
		return runInit(initOptions{socket: *socket, dial: *dial, keyFile: *keyFile, lease: *lease}, fs.Args())
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

type initOptions struct {
	socket, dial, keyFile string
	lease                 time.Duration
}

// runInit is the agent as PID 1.
func runInit(o initOptions, process []string) int {
	if len(process) == 0 {
		fmt.Fprintln(os.Stderr, "runbox agent init: no lifetime process")
		return 2
	}
	if (o.dial == "") == (o.keyFile == "") {
		fmt.Fprintln(os.Stderr, "runbox agent init: want either --dial DIR or --key-file FILE")
		return 2
	}
	// Threads first: a Go program that cannot create an OS thread dies, and
	// commands may exhaust the session's pids limit later on.
	prewarmThreads(agentThreads)

	s := &server{waiters: map[int]chan unix.WaitStatus{}, oom: openOOMScore(), conns: map[*conn]bool{}}
	expired := make(chan struct{})
	if o.lease > 0 {
		s.lease = newLease(o.lease, expired)
	}
	if o.keyFile != "" {
		key, err := takeKey(o.keyFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "runbox agent init:", err)
			return 1
		}
		s.key = key
	}
	// Orphans of commands become ours to reap even if we are not PID 1
	// (for example under the Engine's own init).
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs) // everything: SIGCHLD to reap, the rest to forward
	lifetime, err := s.startLifetime(process)
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbox agent init:", err)
		return 127
	}
	if o.dial != "" {
		err = s.watch(o.dial)
	} else {
		var ln net.Listener
		if ln, err = listen(o.socket); err == nil {
			go s.serve(ln)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbox agent init:", err)
		_ = unix.Kill(-lifetime, unix.SIGKILL)
		return 1
	}

	for {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-expired:
			// Nobody holds the session any more. As PID 1 our exit ends
			// every process of the session; the Engine removes the rest.
			s.lastWord(Fatal{Error: fmt.Sprintf("session ended: the session's lease expired: no caller renewed it for %s", o.lease), Ended: true})
			_ = unix.Kill(-lifetime, unix.SIGKILL)
			return 128 + int(unix.SIGKILL)
		}
		if sig == unix.SIGCHLD {
			if st, done := s.reap(lifetime); done {
				s.end(fmt.Sprintf("the lifetime process %s", describeStatus(st)), exitStatus(st))
				if s.lease != nil {
					// The Engine removes a leased session's container as
					// soon as the agent exits, and the status with it: stay
					// until the lease runs out (no longer renewable), so
					// that a caller that connects meanwhile still learns
					// how the session ended.
					s.lease.final()
					<-expired
				}
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
}

// describeStatus says how a process ended, in the Engine's words.
func describeStatus(st unix.WaitStatus) string {
	if st.Signaled() {
		return fmt.Sprintf("exited with code %d (%s)", exitStatus(st), unix.SignalName(st.Signal()))
	}
	return fmt.Sprintf("exited with code %d", exitStatus(st))
}

// end records why the session ended, for callers that connect later, and
// tells the connected ones.
func (s *server) end(msg string, status int) {
	over := &Fatal{Error: "session ended: " + msg, Ended: true, Status: &status}
	s.mu.Lock()
	s.over = over
	s.mu.Unlock()
	s.lastWord(*over)
}

// endedWith returns why the session ended, or nil while it runs.
func (s *server) endedWith() *Fatal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.over
}

// lastWord tells every connected caller why the session ends, before the
// agent exits: with a lease the Engine removes the container at once, and
// with it the status a caller would otherwise ask for.
func (s *server) lastWord(last Fatal) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = c.sendJSON(TypeError, 0, last)
	}
}

// lease is a session's time to live, renewed by its callers.
type lease struct {
	mu       sync.Mutex
	ttl      time.Duration
	timer    *time.Timer
	released bool
	ended    bool // the session ended: neither renewed nor released again
}

func newLease(ttl time.Duration, expired chan<- struct{}) *lease {
	return &lease{ttl: ttl, timer: time.AfterFunc(ttl, func() { close(expired) })}
}

// renew starts the time to live again, unless the lease was released or
// has already expired.
func (l *lease) renew() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.released {
		l.timer.Reset(l.ttl)
	}
}

// final stops renewals: the lease runs out at its current end.
func (l *lease) final() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released, l.ended = true, true // no more renewals; the timer keeps running
}

// release makes the session persistent.
func (l *lease) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return // the session has ended; it goes when the lease runs out
	}
	l.released = true
	l.timer.Stop()
}

// takeKey reads the session key and removes its file, before any code of
// the session runs: afterwards the key exists only in the agent's memory,
// which nothing in the session can read.
func takeKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("session key: cannot remove %s, refusing to serve: %w", path, err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("session key: %d bytes, want %d", len(key), KeySize)
	}
	return key, nil
}

// agentThreads is how many OS threads the agent makes before it serves.
// The Go runtime keeps idle threads and reuses them, so the agent needs no
// new thread while the commands hold every pid the session may have.
const agentThreads = 12

// prewarmThreads makes the runtime start n threads now: n goroutines
// locked to their threads and blocked at once need n of them. Unlocked,
// the threads go idle and stay.
func prewarmThreads(n int) {
	var ready sync.WaitGroup
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Anyone may connect: only a caller that proves the key is served.
	_ = os.Chmod(path, 0o777)
	return ln, nil
}

// watch serves callers on a local Engine. A caller creates a listening
// socket named *.sock in dir, which the session sees read-only: nothing
// in the session can create, rename or replace a file there, so a socket
// that appears in it is the caller's. The agent dials each one once.
func (s *server) watch(dir string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	events := os.NewFile(uintptr(fd), "inotify") // non-blocking: the poller waits, not a thread
	ents, err := os.ReadDir(dir)
	if err != nil {
		events.Close()
		return err
	}
	for _, e := range ents {
		s.dialCaller(dir, e.Name())
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := events.Read(buf)
			if err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameStart := off + unix.SizeofInotifyEvent
				name := strings.TrimRight(string(buf[nameStart:nameStart+int(ev.Len)]), "\x00")
				off = nameStart + int(ev.Len)
				s.dialCaller(dir, name)
			}
		}
	}()
	return nil
}

// dialCaller connects to a caller's socket and serves it, once the
// kernel confirms that the listener is outside the session: a process of
// the session's own pid namespace would show its pid there, a process
// outside shows 0.
func (s *server) dialCaller(dir, name string) {
	if !strings.HasSuffix(name, ".sock") || strings.Contains(name, "/") {
		return
	}
	go func() {
		c, err := net.Dial("unix", filepath.Join(dir, name))
		if err != nil {
			return // gone already, or not for us
		}
		cred, err := peerCred(c.(*net.UnixConn))
		if err != nil || cred.Pid != 0 {
			c.Close()
			return
		}
		s.handle(c)
	}()
}

// peerCred returns the kernel's record of who is at the other end of c,
// translated into this process's namespaces.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
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
	key     []byte    // the session key every caller must prove; nil on a local Engine
	oom     *oomScore // nil: commands keep the agent's OOM score
	lease   *lease    // nil: the session is persistent
	conns   map[*conn]bool
	over    *Fatal // why the session ended; nil while it runs

	afterHandshake func() // tests: runs between a handshake and the connection's registration

	nullOnce sync.Once
	null     int // /dev/null, the stdin of commands without input; -1 if it cannot be opened
}

// startLifetime starts the session's own process with the agent's stdio.
func (s *server) startLifetime(argv []string) (int, error) {
	path, err := execpath.Look(argv[0], "", execpath.PathOf(os.Environ()))
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

	// Start requests still arriving in parts, and those that grew too
	// large; only the connection's reading goroutine touches them.
	parts    map[uint32][]byte
	oversize map[uint32]bool
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

// handshakeTimeout bounds how long a caller may take to say hello and
// prove itself.
const handshakeTimeout = 10 * time.Second

func (s *server) handle(nc net.Conn) {
	c := &conn{s: s, c: nc, parts: map[uint32][]byte{}, oversize: map[uint32]bool{}}
	defer func() {
		// A client that is gone cannot collect results: its commands die.
		c.cmds.Range(func(_, v any) bool {
			v.(*command).kill(unix.SIGKILL)
			return true
		})
		nc.Close()
	}()
	r := NewReader(nc)
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if over := s.endedWith(); over != nil {
		_, _ = r.Next() // the caller's hello: let it finish writing, then answer
		_ = c.sendJSON(TypeError, 0, *over)
		return
	}
	if err := c.handshake(r); err != nil {
		_ = c.sendJSON(TypeError, 0, Fatal{Error: err.Error()})
		return
	}
	_ = nc.SetDeadline(time.Time{})
	c.s.lease.renew()
	if s.afterHandshake != nil {
		s.afterHandshake()
	}
	// Registered and checked in one step with end, which sets over and
	// then tells the registered connections: a session that ended during
	// this handshake is told here, never missed by both. The connection
	// stays open either way: the caller closes it once it has read why,
	// and a write of its own meanwhile must not fail first as a broken
	// pipe, which would read as a transport failure.
	s.mu.Lock()
	over := s.over
	if s.conns != nil {
		s.conns[c] = true
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	if over != nil {
		_ = c.sendJSON(TypeError, 0, *over)
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

// handshake exchanges hellos and, when the session has a key, has the
// client prove it after the agent proved it: no command is accepted from
// a caller that did not.
func (c *conn) handshake(r *Reader) error {
	f, err := r.Next()
	if err != nil || f.Type != TypeHello {
		return errors.New("expected hello")
	}
	var h Hello
	if err := Decode(f, &h); err != nil || h.Version != Version {
		return fmt.Errorf("unsupported protocol version %d (this agent speaks %d)", h.Version, Version)
	}
	nonce := random(NonceSize)
	reply := Hello{Version: Version, Pid: os.Getpid(), Nonce: nonce, NoStdin: true, Discard: true}
	if c.s.key != nil {
		if len(h.Nonce) != NonceSize {
			return fmt.Errorf("%w: the client sent no nonce", ErrAuth)
		}
		reply.Proof = AgentProof(c.s.key, h.Nonce, nonce)
	}
	if err := c.sendJSON(TypeHello, 0, reply); err != nil {
		return err
	}
	if c.s.key == nil {
		return nil
	}
	f, err = r.Next()
	if err != nil || f.Type != TypeAuth {
		return fmt.Errorf("%w: expected the client's proof", ErrAuth)
	}
	var a Auth
	if err := Decode(f, &a); err != nil || !hmac.Equal(a.Proof, ClientProof(c.s.key, h.Nonce, nonce)) {
		return ErrAuth
	}
	return nil
}

func (c *conn) dispatch(f Frame) error {
	switch f.Type {
	case TypeLease:
		var l Lease
		if err := Decode(f, &l); err != nil {
			return err
		}
		if l.Release {
			c.s.lease.release()
		} else {
			c.s.lease.renew()
		}
		return nil
	case TypeStartPart:
		if f.ID == 0 {
			return fmt.Errorf("%w: start part for command id 0", ErrProtocol)
		}
		if !c.oversize[f.ID] {
			if len(c.parts[f.ID])+len(f.Payload) > MaxStartRequest {
				// The request fails, not the connection.
				delete(c.parts, f.ID)
				c.oversize[f.ID] = true
			} else {
				c.parts[f.ID] = append(c.parts[f.ID], f.Payload...)
			}
		}
		return nil
	case TypeStart:
		if over := c.s.endedWith(); over != nil {
			// The session is over: nothing more starts in it.
			return c.sendJSON(TypeError, 0, *over)
		}
		if _, loaded := c.cmds.Load(f.ID); loaded || f.ID == 0 {
			return fmt.Errorf("%w: command id %d reused", ErrProtocol, f.ID)
		}
		payload := f.Payload
		if head, ok := c.parts[f.ID]; ok {
			payload = append(head, payload...)
			delete(c.parts, f.ID)
		}
		if c.oversize[f.ID] || len(payload) > MaxStartRequest {
			delete(c.oversize, f.ID)
			return c.sendJSON(TypeStartFailed, f.ID, StartFailed{Error: fmt.Sprintf("start request exceeds %d bytes", MaxStartRequest)})
		}
		var req StartRequest
		if err := json.Unmarshal(payload, &req); err != nil {
			return c.sendJSON(TypeStartFailed, f.ID, StartFailed{Error: "malformed start request: " + err.Error()})
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
	failProgram := func(err error) {
		_ = c.sendJSON(TypeStartFailed, id, StartFailed{Error: err.Error(), Reason: startReason(err)})
	}
	if len(req.Args) == 0 {
		fail(errors.New("empty argument vector"))
		return
	}
	path, err := execpath.Look(req.Args[0], req.Dir, execpath.PathOf(env))
	if err != nil {
		failProgram(err)
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

	var cred *syscall.Credential
	if req.User != "" {
		c, err := lookupUser(req.User)
		if err != nil {
			fail(err)
			return
		}
		cred = c
		// Only root may set supplementary groups; anyone else keeps
		// theirs and can only "switch" to themselves.
		cred.NoSetGroups = os.Getuid() != 0
	}

	// The child's ends are plain descriptors handed to the fork: wrapping
	// them in *os.File would register them with the poller and switch
	// them between blocking modes, a dozen system calls per command for
	// descriptors the agent never reads.
	var childFds, owned []int // what the child gets; what this command made
	var parentEnds []*os.File
	var stdout, stderr *os.File
	closeChild := func() {
		for _, fd := range owned {
			unix.Close(fd)
		}
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
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
		sfd, err := unix.Dup(int(slave.Fd()))
		slave.Close()
		if err != nil {
			master.Close()
			fail(err)
			return
		}
		unix.CloseOnExec(sfd)
		childFds, owned = []int{sfd, sfd, sfd}, []int{sfd}
		cmd.tty, cmd.stdin, stdout = master, master, master
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		parentEnds = []*os.File{master}
	} else {
		in := c.s.devNull()
		if !req.NoStdin || in < 0 {
			w, r, err := commandPipe(false)
			if err != nil {
				fail(err)
				return
			}
			in, cmd.stdin = r, w
			owned = append(owned, r)
			parentEnds = append(parentEnds, w)
		}
		childFds = append(childFds, in)
		for _, o := range []struct {
			f       **os.File
			discard bool
		}{{&stdout, req.DiscardStdout}, {&stderr, req.DiscardStderr}} {
			if o.discard && c.s.devNull() >= 0 {
				childFds = append(childFds, c.s.devNull())
				continue
			}
			r, w, err := commandPipe(true)
			if err != nil {
				closeChild()
				closeAll(parentEnds)
				fail(err)
				return
			}
			*o.f = r
			childFds = append(childFds, w)
			owned = append(owned, w)
			parentEnds = append(parentEnds, r)
		}
	}

	sys.Credential = cred
	pidfd := -1
	if pidfdWaits() {
		sys.PidFD = &pidfd
	}
	files := make([]uintptr, len(childFds))
	for i, fd := range childFds {
		files[i] = uintptr(fd)
	}
	status := make(chan unix.WaitStatus, 1)
	for deadline := time.Now().Add(forkRetry); ; {
		c.s.mu.Lock()
		c.s.oom.around(func() {
			cmd.pid, err = syscall.ForkExec(path, req.Args, &syscall.ProcAttr{Dir: req.Dir, Env: env, Files: files, Sys: sys})
		})
		if err == nil {
			c.s.waiters[cmd.pid] = status
		}
		c.s.mu.Unlock()
		// EAGAIN: the pids limit is full, perhaps of a killed command's
		// processes that the reaper (which needs s.mu) is collecting.
		if !errors.Is(err, unix.EAGAIN) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	closeChild()
	if err != nil {
		closeAll(parentEnds)
		failProgram(&os.PathError{Op: "fork/exec", Path: path, Err: err})
		return
	}
	c.cmds.Store(id, cmd)
	if cmd.stdin == nil {
		// Stdin is /dev/null, and no started frame: the client has
		// nothing to send and waits only for the exit.
		cmd.stopStdin()
	} else if req.NoStdin && !req.TTY {
		cmd.stdin.Close()
		cmd.stopStdin()
	} else {
		_ = c.sendJSON(TypeStarted, id, Started{Pid: cmd.pid})
		go cmd.pumpStdin(c, id)
	}
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
	if stdout != nil {
		outputs.Add(1)
		go pump(stdout, TypeStdout)
	}
	if stderr != nil {
		outputs.Add(1)
		go pump(stderr, TypeStderr)
	}
	go func() {
		st, ok := c.s.waitExit(cmd.pid, pidfd)
		if !ok {
			st = <-status // the reaper collected it
		}
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

// forkRetry is how long a start that found no free pid is retried.
const forkRetry = 250 * time.Millisecond

// commandOOMScore is the oom_score_adj of every command: the highest, so
// that when the session runs out of memory the kernel kills commands
// before the agent (and before the lifetime process, which keeps its own).
const commandOOMScore = "1000"

// oomScore lends commands a higher OOM score than the agent's. A child
// inherits its parent's score at fork, so the agent raises its own just
// for the spawn and lowers it again: raising needs no privilege, and
// lowering back to a value the Engine set does not either. Writing the
// child's score after the spawn instead would leave whatever the child
// forks first at the agent's score.
type oomScore struct {
	f    *os.File // /proc/self/oom_score_adj, kept open
	base []byte   // the agent's own score
}

// openOOMScore returns nil when the score cannot be managed; commands
// then share the agent's score.
func openOOMScore() *oomScore {
	base, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return nil
	}
	f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	o := &oomScore{f: f, base: bytes.TrimSpace(base)}
	if !o.set([]byte(commandOOMScore)) || !o.set(o.base) {
		f.Close()
		return nil
	}
	return o
}

func (o *oomScore) set(v []byte) bool {
	_, err := o.f.WriteAt(v, 0)
	return err == nil
}

// around runs spawn with the commands' score. The caller serializes.
func (o *oomScore) around(spawn func()) {
	if o == nil || !o.set([]byte(commandOOMScore)) {
		spawn()
		return
	}
	spawn()
	if !o.set(o.base) {
		fmt.Fprintln(os.Stderr, "runbox agent: cannot restore the agent's OOM score")
	}
}

// pumpBuffers recycles output buffers: two per command would otherwise be
// allocated for every `true`.
var pumpBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

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

// startReason classifies a failure to find or execute a program.
func startReason(err error) string {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return ReasonNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOEXEC):
		return ReasonNotExecutable
	}
	return ""
}
