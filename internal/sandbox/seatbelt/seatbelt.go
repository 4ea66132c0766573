// Package seatbelt turns a sandbox.Spec into a macOS Seatbelt profile and
// the sandbox-exec command line that enforces it. It is plain text
// generation, built and tested on every platform.
package seatbelt

import (
	"fmt"
	"strings"

	"github.com/runbox-dev/runbox/internal/sandbox"
)

// Launcher is macOS's Seatbelt launcher, always run by absolute path so
// that PATH cannot substitute another program.
const Launcher = "/usr/bin/sandbox-exec"

// systemReads are what any process needs to read to start on
// macOS when the policy lists its readable roots.
var systemReads = []string{
	"/usr", "/bin", "/sbin", "/System", "/Library", "/private/etc", "/private/var/db/timezone",
	"/dev", "/private/var/run", "/opt/homebrew",
}

// Profile returns a Seatbelt profile for c and the -D parameters it
// refers to. Paths never appear in the profile text: they are passed as
// parameters, so no path can inject profile syntax. Every path is given in
// both its /private spelling and its public one, because Seatbelt matches
// the resolved path (/private/tmp) while callers use /tmp.
//
// The profile denies by default; allows reading (everything, or the
// readable roots plus the system), executing and forking; writing only the
// writable roots (everything with BroadWrite) and the terminal and null
// devices; and network access only when the policy allows it. Signals and
// process inspection are limited to the sandbox's own processes.
func Profile(c *sandbox.Spec) (profile string, params []string) {
	var b strings.Builder
	n := 0
	param := func(p string) string {
		name := fmt.Sprintf("P%d", n)
		n++
		params = append(params, "-D"+name+"="+p)
		return fmt.Sprintf("(param %q)", name)
	}
	subpaths := func(paths []string) string {
		var parts []string
		for _, p := range paths {
			for _, s := range spellings(p) {
				parts = append(parts, "(subpath "+param(s)+")")
			}
		}
		return strings.Join(parts, " ")
	}
	b.WriteString("(version 1)\n(deny default)\n")
	b.WriteString("(allow process-exec)\n(allow process-fork)\n")
	b.WriteString("(allow signal (target same-sandbox))\n(allow process-info* (target same-sandbox))\n")
	b.WriteString("(allow sysctl-read)\n(allow user-preference-read)\n")
	b.WriteString("(allow ipc-posix-shm)\n(allow ipc-posix-sem)\n(allow pseudo-tty)\n")
	b.WriteString("(allow mach-lookup (global-name \"com.apple.system.opendirectoryd.libinfo\") (global-name \"com.apple.system.notification_center\") (global-name \"com.apple.system.logger\") (global-name \"com.apple.logd\"))\n")
	if c.Readable == nil {
		b.WriteString("(allow file-read*)\n")
	} else {
		b.WriteString("(allow file-read-metadata)\n")
		b.WriteString("(allow file-read* (literal \"/\") " + subpaths(append(append([]string{}, systemReads...), c.Readable...)) + ")\n")
	}
	b.WriteString("(allow file-read* file-write-data file-ioctl (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/tty\") (literal \"/dev/dtracehelper\") (regex #\"^/dev/ttys[0-9]+$\") (literal \"/dev/ptmx\"))\n")
	switch {
	case c.BroadWrite:
		b.WriteString("(allow file-write*)\n")
	case len(c.Writable) > 0:
		b.WriteString("(allow file-write* " + subpaths(c.Writable) + ")\n")
	}
	if c.Network {
		b.WriteString("(allow network*)\n(allow system-socket)\n(allow mach-lookup (global-name \"com.apple.dnssd.service\") (global-name \"com.apple.SystemConfiguration.configd\"))\n")
	}
	return b.String(), params
}

// spellings returns p and, for paths under macOS's /private
// symlinks (/tmp, /var, /etc), the other spelling.
func spellings(p string) []string {
	out := []string{p}
	for _, d := range []string{"/tmp", "/var", "/etc"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return append(out, "/private"+p)
		}
		if priv := "/private" + d; p == priv || strings.HasPrefix(p, priv+"/") {
			return append(out, strings.TrimPrefix(p, "/private"))
		}
	}
	return out
}

// Argv wraps a command in sandbox-exec.
func Argv(c *sandbox.Spec) []string {
	profile, params := Profile(c)
	argv := append([]string{Launcher, "-p", profile}, params...)
	argv = append(argv, "--", c.Path)
	if len(c.Args) > 1 {
		argv = append(argv, c.Args[1:]...)
	}
	return argv
}

// Command rewrites a launch to run under sandbox-exec with c's profile;
// without a spec (an unconfined policy) the launch is unchanged. The
// environment, directory and stdio stay the caller's.
func Command(c *sandbox.Spec, path string, args []string) (string, []string) {
	if c == nil {
		return path, args
	}
	return Launcher, Argv(c)
}
