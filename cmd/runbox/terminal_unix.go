//go:build unix

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/moby/term"

	"github.com/runbox-dev/runbox"
)

// setupTerminal puts stdin in raw mode when it is a terminal and the command
// reads it, and forwards window-size changes. restore undoes the raw mode
// and must run on every exit path.
func setupTerminal(ctx context.Context, interactive bool) (restore func(), resize <-chan runbox.TermSize) {
	restore = func() {}
	fd := os.Stdin.Fd()
	if interactive && term.IsTerminal(fd) {
		if state, err := term.SetRawTerminal(fd); err == nil {
			restore = func() { _ = term.RestoreTerminal(fd, state) }
		}
	}
	ch := make(chan runbox.TermSize, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-winch:
				select {
				case ch <- currentSize():
				default: // the previous size is still pending; the next signal brings the newest
				}
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}()
	prev := restore
	restore = func() {
		signal.Stop(winch)
		close(done)
		prev()
	}
	return restore, ch
}

// currentSize is the size of the terminal on stdout (or stdin), or zero.
func currentSize() runbox.TermSize {
	for _, f := range []*os.File{os.Stdout, os.Stdin} {
		if ws, err := term.GetWinsize(f.Fd()); err == nil && ws.Height > 0 {
			return runbox.TermSize{Rows: ws.Height, Cols: ws.Width}
		}
	}
	return runbox.TermSize{}
}

// processAlive reports whether pid exists (a permission error means it
// does).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
