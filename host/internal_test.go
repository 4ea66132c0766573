package host

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/runbox-dev/runbox"
)

func TestWindowsShellResolution(t *testing.T) {
	const cmd = `echo a & echo "b c" | findstr b`
	for _, sys := range []string{`C:\Windows\System32`, `C:\Windows\System32\`, `c:/Windows/System32/`} {
		path, args, line, err := windowsShell(sys, cmd)
		if err != nil {
			t.Fatalf("%q: %v", sys, err)
		}
		dir := strings.TrimRight(sys, `\/`)
		if path != dir+`\cmd.exe` {
			t.Errorf("%q: path %q", sys, path)
		}
		if want := `"` + dir + `\cmd.exe" /d /s /c "` + cmd + `"`; line != want {
			t.Errorf("%q: command line\n got %s\nwant %s", sys, line, want)
		}
		if !slices.Equal(args, []string{path, "/d", "/s", "/c", cmd}) {
			t.Errorf("%q: args %q", sys, args)
		}
	}
	if path, _, _, err := windowsShell(`\\server\share\System32`, "ver"); err != nil || path != `\\server\share\System32\cmd.exe` {
		t.Errorf("UNC system directory: %q %v", path, err)
	}
	// Never anything that a PATH or working-directory lookup could supply.
	for _, bad := range []string{"", `System32`, `.\System32`, `C:`, `C:System32`, "/usr/bin", `\\`, `C:\Win"dows`} {
		if path, _, _, err := windowsShell(bad, "ver"); !errors.Is(err, runbox.ErrStart) {
			t.Errorf("system directory %q accepted as %q", bad, path)
		}
	}
}

func TestDedupEnvLastWins(t *testing.T) {
	got := dedupEnv([]string{"A=1", "B=2", "A=3", "C=", "B=4"})
	if want := []string{"A=3", "B=4", "C="}; !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	if v := envValue([]string{"PATH=/a", "X=1", "PATH=/b"}, "PATH"); v != "/b" {
		t.Fatalf("envValue %q", v)
	}
}

func TestCaptureKeepsAtMostLimit(t *testing.T) {
	calls := 0
	c := newCapture(1000, func() { calls++ })
	chunk := []byte(strings.Repeat("x", 300))
	for range 100 {
		if n, err := c.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d %v", n, err)
		}
	}
	if len(c.bytes()) != 1000 || cap(c.buf) > 1000 || !c.exceeded() {
		t.Fatalf("len %d cap %d exceeded %v", len(c.bytes()), cap(c.buf), c.exceeded())
	}
	if calls != 1 {
		t.Fatalf("overflow signalled %d times, want once", calls)
	}
	u := newCapture(0, func() { t.Fatal("overflow without a limit") })
	u.Write(chunk)
	if len(u.bytes()) != 300 || u.exceeded() {
		t.Fatal("unlimited capture misbehaves")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Option{WithTerminateGrace(0), WithTerminateGrace(-1), WithWaitDelay(0)} {
		if _, err := New(o); err == nil {
			t.Error("accepted a non-positive duration")
		}
	}
}
