package host

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// capture collects combined output for the RunArgv family. It is written by
// a single copying goroutine (stdout and stderr share one pipe) and read
// only after that goroutine has finished.
type capture struct {
	limit int // 0: unlimited
	buf   []byte
	over  bool
	// onOverflow is called once, from the copying goroutine, when the limit
	// is passed.
	onOverflow func()
}

func newCapture(limit int, onOverflow func()) *capture {
	return &capture{limit: limit, onOverflow: onOverflow}
}

// Write keeps at most limit bytes. Past the limit it reports success and
// drops the data, so the process never blocks on a full pipe while it is
// being killed.
func (c *capture) Write(p []byte) (int, error) {
	if c.over {
		return len(p), nil
	}
	keep := len(p)
	if c.limit > 0 && len(c.buf)+keep > c.limit {
		keep = c.limit - len(c.buf)
		c.over = true
		defer c.onOverflow()
	}
	c.grow(keep)
	c.buf = append(c.buf, p[:keep]...)
	return len(p), nil
}

// grow makes room for n more bytes, doubling but never past the limit, so
// that memory stays within the limit however much the process writes.
func (c *capture) grow(n int) {
	if cap(c.buf)-len(c.buf) >= n {
		return
	}
	newCap := max(2*cap(c.buf), len(c.buf)+n, 512)
	if c.limit > 0 {
		newCap = min(newCap, c.limit)
	}
	b := make([]byte, len(c.buf), newCap)
	copy(b, c.buf)
	c.buf = b
}

func (c *capture) bytes() []byte  { return c.buf }
func (c *capture) exceeded() bool { return c.over }

// outputs wires a process's stdout and stderr for Run and the output
// helpers. *os.File writers are handed to the child directly (no copy at
// all); every other distinct writer gets a pipe of our own and one copying
// goroutine. Owning the pipe lets teardown, not os/exec, decide when to
// stop reading, and lets the pipe be larger than the default (see
// growPipe), so that a heavy writer blocks less often.
type outputs struct {
	stdout, stderr *os.File // what the child gets; nil is the null device
	pipes          []*outputPipe
}

// newOutputs prepares the pipes. With the same writer for both streams
// (compared without panicking on non-comparable types) both share one pipe,
// which keeps the order the process wrote in.
func newOutputs(stdout, stderr io.Writer) (*outputs, error) {
	o := &outputs{}
	mu := new(sync.Mutex) // serializes writes across both streams
	wire := func(w io.Writer, name string) (*os.File, error) {
		if w == nil {
			return nil, nil
		}
		if f, ok := w.(*os.File); ok {
			return f, nil // a nil *os.File is the null device too
		}
		op, err := newOutputPipe(&stickyWriter{mu: mu, w: w, name: name})
		if err != nil {
			return nil, err
		}
		o.pipes = append(o.pipes, op)
		return op.w, nil
	}
	var err error
	if o.stdout, err = wire(stdout, "stdout"); err != nil {
		return nil, err
	}
	if stdout != nil && stderr != nil && sameWriter(stdout, stderr) {
		o.stderr = o.stdout
	} else if o.stderr, err = wire(stderr, "stderr"); err != nil {
		o.abort()
		return nil, err
	}
	return o, nil
}

// start begins copying once the child holds the write ends.
func (o *outputs) start() {
	for _, op := range o.pipes {
		op.start()
	}
}

// abort releases the pipes of a process that did not start.
func (o *outputs) abort() {
	for _, op := range o.pipes {
		closeFiles(op.r, op.w)
	}
}

// finish runs after teardown: it lets the copies drain to end-of-file,
// cuts off after delay a pipe that an escaped descendant still holds, and
// returns only when no goroutine will use a caller's writer again.
func (o *outputs) finish(delay time.Duration) {
	var timer *time.Timer
	for _, op := range o.pipes {
		select {
		case <-op.done:
		default:
			if timer == nil {
				timer = time.NewTimer(delay)
				defer timer.Stop()
			}
			select {
			case <-op.done:
			case <-timer.C:
				// Expired: cut off this pipe and any later one.
				timer.Reset(0)
			}
		}
		op.r.Close()
		<-op.done
	}
}

// err returns the first error a caller's writer returned. It must be called
// after finish.
func (o *outputs) err() error {
	for _, op := range o.pipes {
		if sw, ok := op.dst.(*stickyWriter); ok && sw.err != nil {
			return fmt.Errorf("host: writing %s: %w", sw.name, sw.err)
		}
	}
	return nil
}

// copyBufSize is the copy buffer: a quarter of the enlarged pipe, so that a
// read rarely finds the pipe empty before the next write refills it.
const copyBufSize = 64 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// outputPipe is one pipe from the child to a writer.
type outputPipe struct {
	r, w *os.File
	dst  io.Writer
	done chan struct{}
}

func newOutputPipe(dst io.Writer) (*outputPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	growPipe(w)
	return &outputPipe{r: r, w: w, dst: dst, done: make(chan struct{})}, nil
}

func (op *outputPipe) start() {
	// The child has its own copy; ours would hide end-of-file.
	op.w.Close()
	go func() {
		defer close(op.done)
		bp := copyBufs.Get().(*[]byte)
		defer copyBufs.Put(bp)
		buf := *bp
		for {
			n, err := op.r.Read(buf)
			if n > 0 {
				// Write errors are kept by the writer, which then discards.
				_, _ = op.dst.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
}

// sameWriter compares two writers without panicking on non-comparable
// dynamic types.
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// stickyWriter forwards to a caller's writer until it fails, then discards,
// so that a failing writer never leaves the process blocked on a full pipe.
type stickyWriter struct {
	mu   *sync.Mutex
	w    io.Writer
	name string
	err  error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return len(p), nil
	}
	n, err := s.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = err
	}
	return len(p), nil
}
