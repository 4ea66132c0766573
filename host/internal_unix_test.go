//go:build unix

package host

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	assert.Equal(t, []string{"PATH=/caller/bin", "HOME=fb-HOME", "TMPDIR=fb-TMPDIR", "LANG=fb-LANG"}, baseEnv(lookup, false, fallback))
	assert.Contains(t, baseEnv(lookup, true, fallback), "TERM=fb-TERM", "TERM with a terminal")
	assert.Equal(t, []string{"PATH", "HOME", "TMPDIR", "LANG", "USER"}, baseEnvKeys, "baseEnv leaves the shared key list alone")
}

func TestLookPath(t *testing.T) {
	p, err := lookPath("sh", "", "relative/dir:/bin:/usr/bin")
	require.NoError(t, err)
	assert.Contains(t, []string{"/bin/sh", "/usr/bin/sh"}, p)
	// No PATH at all: the default search path, as execvp does.
	p, err = lookPath("sh", "", "")
	require.NoError(t, err, "default PATH")
	assert.NotEmpty(t, p, "default PATH")
	_, err = lookPath("sh", "", "relative/only")
	assert.Error(t, err, "found sh through a relative PATH entry only")
}
