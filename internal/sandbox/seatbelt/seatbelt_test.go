package seatbelt

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/runbox-dev/runbox/internal/sandbox"
)

// paramValues maps the profile's -D parameters back to their paths.
func paramValues(params []string) map[string]string {
	m := map[string]string{}
	for _, p := range params {
		k, v, _ := strings.Cut(strings.TrimPrefix(p, "-D"), "=")
		m[k] = v
	}
	return m
}

func TestSeatbeltProfileReadOnlyNoNetwork(t *testing.T) {
	prof, params := Profile(&sandbox.Spec{Path: "/bin/ls"})
	assert.True(t, strings.HasPrefix(prof, "(version 1)\n(deny default)\n"), prof)
	assert.Contains(t, prof, "(allow file-read*)\n")
	assert.NotContains(t, prof, "(allow file-write*")
	assert.NotContains(t, prof, "network")
	assert.Contains(t, prof, "(allow signal (target same-sandbox))")
	assert.Empty(t, params)
}

func TestSeatbeltProfileWritableRoots(t *testing.T) {
	prof, params := Profile(&sandbox.Spec{Writable: []string{"/tmp/work", "/Users/me/src", `/odd "path") (allow default`}})
	vals := paramValues(params)
	var got []string
	for _, v := range vals {
		got = append(got, v)
	}
	assert.ElementsMatch(t, []string{"/tmp/work", "/private/tmp/work", "/Users/me/src", `/odd "path") (allow default`}, got,
		"both spellings of /tmp paths, and paths only as parameters")
	assert.Contains(t, prof, `(allow file-write* (subpath (param "P0")) (subpath (param "P1")) (subpath (param "P2")) (subpath (param "P3")))`)
	assert.NotContains(t, prof, "/Users/me/src", "no path is spliced into the profile")
	assert.NotContains(t, prof, "(allow default")
}

func TestSeatbeltProfileNetworkAndBroadWrite(t *testing.T) {
	prof, _ := Profile(&sandbox.Spec{Network: true, BroadWrite: true})
	assert.Contains(t, prof, "(allow network*)")
	assert.Contains(t, prof, "(allow file-write*)\n")
}

func TestSeatbeltProfileReadableRoots(t *testing.T) {
	prof, params := Profile(&sandbox.Spec{Readable: []string{"/private/var/src"}})
	assert.NotContains(t, prof, "(allow file-read*)\n")
	assert.Contains(t, prof, "(allow file-read-metadata)")
	vals := paramValues(params)
	var got []string
	for _, v := range vals {
		got = append(got, v)
	}
	assert.Contains(t, got, "/private/var/src")
	assert.Contains(t, got, "/var/src")
	assert.Contains(t, got, "/usr")
}

func TestSeatbeltArgv(t *testing.T) {
	argv := Argv(&sandbox.Spec{Path: "/bin/echo", Args: []string{"echo", "-n", "hi"}, Writable: []string{"/w"}})
	assert.Equal(t, Launcher, argv[0], "sandbox-exec by absolute path")
	assert.Equal(t, "-p", argv[1])
	assert.Equal(t, []string{"-DP0=/w", "--", "/bin/echo", "-n", "hi"}, argv[3:])
}

func TestSeatbeltSpellings(t *testing.T) {
	assert.Equal(t, []string{"/tmp", "/private/tmp"}, spellings("/tmp"))
	assert.Equal(t, []string{"/private/var/x", "/var/x"}, spellings("/private/var/x"))
	assert.Equal(t, []string{"/etc/hosts", "/private/etc/hosts"}, spellings("/etc/hosts"))
	assert.Equal(t, []string{"/tmpfoo"}, spellings("/tmpfoo"))
	assert.Equal(t, []string{"/Users/x"}, spellings("/Users/x"))
}
