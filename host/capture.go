package host

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/runbox-dev/runbox"
)

// capture collects combined output for the RunArgv family. It is written by
// a single os/exec copying goroutine (stdout and stderr share one pipe) and
// read only after the process has been waited for.
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

// streamWriters adapts runbox.Streams for exec.Cmd. *os.File writers are
// handed to the child directly (no copy at all); other writers are wrapped
// in stickyWriters that share one mutex, so every Write to the caller is
// serialized even when the same non-comparable writer is used for both
// streams.
type streamWriters struct {
	stdout, stderr io.Writer // what exec.Cmd gets; nil means the null device
	outW, errW     *stickyWriter
}

func newStreamWriters(s runbox.Streams) *streamWriters {
	w := &streamWriters{}
	mu := new(sync.Mutex)
	wrap := func(x io.Writer, name string) (io.Writer, *stickyWriter) {
		if x == nil {
			return nil, nil
		}
		if f, ok := x.(*os.File); ok {
			if f == nil {
				return nil, nil
			}
			return f, nil
		}
		sw := &stickyWriter{mu: mu, w: x, name: name}
		return sw, sw
	}
	w.stdout, w.outW = wrap(s.Stdout, "stdout")
	if s.Stdout != nil && s.Stderr != nil && sameWriter(s.Stdout, s.Stderr) {
		// The same value for both: os/exec then shares one pipe and one
		// goroutine, preserving the order the process wrote in.
		w.stderr = w.stdout
	} else {
		w.stderr, w.errW = wrap(s.Stderr, "stderr")
	}
	return w
}

// err returns the first error a caller's writer returned. It must be called
// after the process has been waited for.
func (w *streamWriters) err() error {
	for _, sw := range []*stickyWriter{w.outW, w.errW} {
		if sw != nil && sw.err != nil {
			return fmt.Errorf("host: writing %s: %w", sw.name, sw.err)
		}
	}
	return nil
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
