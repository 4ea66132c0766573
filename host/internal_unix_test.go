//go:build unix

package host

import (
	"slices"
	"testing"
)

func TestBaseEnvFallbacks(t *testing.T) {
	lookup := func(k string) (string, bool) {
		switch k {
		case "PATH":
			return "/caller/bin", true
		case "LANG":
			return "", true // set but empty: treated as missing
		case "SECRET":
			return "x", true
		}
		return "", false
	}
	fallback := func(k string) string {
		if k == "USER" {
			return "" // no fallback: left out
		}
		return "fb-" + k
	}
	got := baseEnv(lookup, false, fallback)
	want := []string{"PATH=/caller/bin", "HOME=fb-HOME", "TMPDIR=fb-TMPDIR", "LANG=fb-LANG"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
	if got := baseEnv(lookup, true, fallback); !slices.Contains(got, "TERM=fb-TERM") {
		t.Fatalf("no TERM with a terminal: %q", got)
	}
	if !slices.Equal(baseEnvKeys, []string{"PATH", "HOME", "TMPDIR", "LANG", "USER"}) {
		t.Fatalf("baseEnv modified the shared key list: %q", baseEnvKeys)
	}
}

func TestLookPath(t *testing.T) {
	if p, err := lookPath("sh", "", "relative/dir:/bin:/usr/bin"); err != nil || (p != "/bin/sh" && p != "/usr/bin/sh") {
		t.Fatalf("sh: %q %v", p, err)
	}
	// No PATH at all: the default search path, as execvp does.
	if p, err := lookPath("sh", "", ""); err != nil || p == "" {
		t.Fatalf("default PATH: %q %v", p, err)
	}
	if _, err := lookPath("sh", "", "relative/only"); err == nil {
		t.Fatal("found sh through a relative PATH entry only")
	}
}
