//go:build windows

package main

import (
	"context"
	"os"

	"github.com/moby/term"
	"golang.org/x/sys/windows"

	"github.com/runbox-dev/runbox"
)

// setupTerminal puts the console in raw mode when the command reads it.
// Windows has no window-size signal, so no resizes are forwarded.
func setupTerminal(_ context.Context, interactive bool) (restore func(), resize <-chan runbox.TermSize) {
	restore = func() {}
	fd := os.Stdin.Fd()
	if interactive && term.IsTerminal(fd) {
		if state, err := term.SetRawTerminal(fd); err == nil {
			restore = func() { _ = term.RestoreTerminal(fd, state) }
		}
	}
	return restore, nil
}

func currentSize() runbox.TermSize {
	if ws, err := term.GetWinsize(os.Stdout.Fd()); err == nil && ws.Height > 0 {
		return runbox.TermSize{Rows: ws.Height, Cols: ws.Width}
	}
	return runbox.TermSize{}
}

func processAlive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	if windows.GetExitCodeProcess(h, &code) != nil {
		return true
	}
	return code == 259 // STILL_ACTIVE
}
