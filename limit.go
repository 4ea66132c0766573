package runbox

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
)

// OutputLimit bounds what a command may write. A zero field sets no bound.
type OutputLimit struct {
	// Stream bounds each of stdout and stderr on its own.
	Stream int64
	// Combined bounds stdout and stderr together.
	Combined int64
}

// Limiter holds a command's output to an [OutputLimit]. It is what
// [Collect] and the command-line tool's --output-limit use, and what a
// caller of a backend's Run can use on its own Streams.
//
// The first write past a limit passes on only what fits and calls stop
// (which should cancel the command) once. From then on everything is
// dropped and reported as written, so that a backend never blocks or
// fails on a writer while the command is being stopped.
type Limiter struct {
	mu    sync.Mutex
	limit OutputLimit
	dst   [2]io.Writer
	n     [2]int64
	over  string
	stop  func()
}

// NewLimiter returns a Limiter that passes what lim allows on to s (a nil
// writer discards) and calls stop once, when a limit is first passed.
func NewLimiter(lim OutputLimit, s Streams, stop func()) *Limiter {
	l := &Limiter{limit: lim, dst: [2]io.Writer{s.Stdout, s.Stderr}, stop: stop}
	for i, w := range l.dst {
		if w == nil {
			l.dst[i] = io.Discard
		}
	}
	return l
}

// Streams returns the writers to hand to the backend.
func (l *Limiter) Streams() Streams {
	return Streams{Stdout: limitedStream{l, 0}, Stderr: limitedStream{l, 1}}
}

// Exceeded names the limit that was passed: "stdout", "stderr",
// "combined", or "" while none was.
func (l *Limiter) Exceeded() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.over
}

// Err returns an error wrapping [ErrOutputLimit] once a limit was passed,
// and nil before.
func (l *Limiter) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.over {
	case "":
		return nil
	case "combined":
		return fmt.Errorf("%w: stdout and stderr together passed %d bytes", ErrOutputLimit, l.limit.Combined)
	}
	return fmt.Errorf("%w: %s passed %d bytes", ErrOutputLimit, l.over, l.limit.Stream)
}

var streamNames = [2]string{"stdout", "stderr"}

// limitedStream is one of a Limiter's two streams.
type limitedStream struct {
	l *Limiter
	i int
}

// Write passes on what fits. Both streams share one lock: a combined limit
// counts them together, and backends may write them concurrently.
func (s limitedStream) Write(p []byte) (int, error) {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.over != "" {
		return len(p), nil
	}
	room, name := int64(math.MaxInt64), ""
	if l.limit.Stream > 0 {
		room, name = l.limit.Stream-l.n[s.i], streamNames[s.i]
	}
	if l.limit.Combined > 0 {
		if left := l.limit.Combined - l.n[0] - l.n[1]; left < room {
			room, name = left, "combined"
		}
	}
	keep := len(p)
	if int64(keep) > room {
		keep = int(room)
		l.over = name
		defer l.stop()
	}
	l.n[s.i] += int64(keep)
	if keep > 0 {
		if _, err := l.dst[s.i].Write(p[:keep]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// boundedBuffer collects up to bound bytes; a Limiter in front of it
// never lets more through.
type boundedBuffer struct {
	b     []byte
	bound int
}

// Write grows the buffer by doubling but never past bound, so that memory
// stays within the limit however much the command writes.
func (w *boundedBuffer) Write(p []byte) (int, error) {
	if cap(w.b)-len(w.b) < len(p) {
		newCap := max(2*cap(w.b), len(w.b)+len(p), 512)
		if w.bound > 0 {
			newCap = max(min(newCap, w.bound), len(w.b)+len(p))
		}
		nb := make([]byte, len(w.b), newCap)
		copy(nb, w.b)
		w.b = nb
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// RunLimited is how a backend's Run honours cmd.OutputLimit: it runs run
// with streams held to the limit and a context that ends when the limit
// is passed, and turns that end into an error wrapping ErrOutputLimit.
// Without a limit it is run itself.
func RunLimited(ctx context.Context, cmd Command, streams Streams, run func(context.Context, Streams) (Result, error)) (Result, error) {
	if cmd.OutputLimit == (OutputLimit{}) {
		return run(ctx, streams)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lim := NewLimiter(cmd.OutputLimit, streams, func() { cancel(ErrOutputLimit) })
	res, err := run(ctx, lim.Streams())
	if lerr := lim.Err(); lerr != nil {
		// However the backend saw the stop (a kill, a cancellation), the
		// command did not complete: its output was cut.
		return Result{ExitCode: -1}, lerr
	}
	return res, err
}
