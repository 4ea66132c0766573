package host

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/runbox-dev/runbox"
)

// runTTY is runLaunch under a new pseudo-terminal: everything the
// process writes (stderr included) goes to r.streams.Stdout, r.stdin is
// typed into the terminal without an EOF at its end, and r.resize is
// applied until it returns.
func (e *Executor) runTTY(ctx context.Context, r runRequest) (runbox.Result, error) {
	failed := runbox.Result{ExitCode: -1}
	if r.starting != nil {
		if err := r.starting(); err != nil {
			return failed, err
		}
	}
	p, err := e.startPTY(r.spec, r.size)
	if err != nil {
		return failed, err
	}

	// Everything from the terminal is copied, files included; a writer that
	// fails stops receiving but the terminal keeps draining, so the process
	// never blocks on it.
	var w io.Writer = io.Discard
	var sticky *stickyWriter
	if r.streams.Stdout != nil {
		sticky = &stickyWriter{mu: new(sync.Mutex), w: r.streams.Stdout, name: "stdout"}
		w = sticky
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(w, p.stdout)
	}()
	var stdinDone chan struct{}
	if r.stdin != nil {
		stdinDone = make(chan struct{})
		go func() {
			defer close(stdinDone)
			_, _ = io.Copy(p.stdin, r.stdin)
		}()
	}
	stop := make(chan struct{})
	var resizer sync.WaitGroup
	if r.resize != nil {
		resizer.Add(1)
		go func() {
			defer resizer.Done()
			for {
				select {
				case <-stop:
					return
				case sz, ok := <-r.resize:
					if !ok {
						return
					}
					if sz.Rows > 0 && sz.Cols > 0 {
						_ = p.Resize(sz)
					}
				}
			}
		}()
	}

	waitErr := e.await(ctx, p.p)
	close(stop)
	resizer.Wait()
	// What the tree wrote is still buffered in the terminal and drains until
	// end-of-file. A descendant that escaped teardown could hold the
	// terminal open: after the wait delay, closing the master cuts it off.
	waitOrTimeout(copied, e.cfg.waitDelay)
	p.releaseOnce.Do(func() { closeFiles(p.files...) })
	// Closing interrupts the copy where the master is pollable (Linux). On
	// macOS a read of the master blocks until the escaped descendant lets
	// go, and Run does not wait for that forever.
	waitOrTimeout(copied, e.cfg.waitDelay)
	// A Read on Command.Stdin that never returns is not waited for past the
	// wait delay; the closed master makes its next write fail.
	if stdinDone != nil {
		waitOrTimeout(stdinDone, e.cfg.waitDelay)
	}

	res, err := p.p.outcome()
	switch {
	case waitErr != nil:
		return failed, joinCleanup(waitErr, p.p)
	case err != nil:
		return failed, err
	}
	if sticky != nil && sticky.err != nil {
		return failed, fmt.Errorf("host: writing stdout: %w", sticky.err)
	}
	return res, nil
}

// ttySize applies the default to a zero size and rejects a size with only
// one dimension.
func ttySize(s runbox.TermSize) (runbox.TermSize, error) {
	switch {
	case s == runbox.TermSize{}:
		return defaultTermSize, nil
	case s.Rows == 0 || s.Cols == 0:
		return runbox.TermSize{}, fmt.Errorf("%w: terminal size %dx%d has a zero dimension", runbox.ErrInvalidCommand, s.Rows, s.Cols)
	}
	return s, nil
}

// waitOrTimeout waits for done, at most d.
func waitOrTimeout(done <-chan struct{}, d time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
