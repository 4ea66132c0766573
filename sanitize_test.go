package runbox

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSanitize is the table of what terminals would interpret and what is
// left of it.
func TestSanitize(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain text", "hello\nworld\n", "hello\nworld\n"},
		{"tab kept", "a\tb\n", "a\tb\n"},
		{"UTF-8 kept", "grüße, 世界 ✓\n", "grüße, 世界 ✓\n"},
		{"literal U+FFFD kept", "a\uFFFDb", "a\uFFFDb"},
		{"invalid bytes replaced one by one", "a\xff\xfeb", "a\uFFFD\uFFFDb"},
		{"truncated sequence replaced", "ok \xe4\xb8", "ok \uFFFD\uFFFD"},
		{"surrogate half replaced", "\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"SGR colours", "\x1b[1;31mred\x1b[0m\n", "red\n"},
		{"CSI with private parameters", "\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
		{"CSI cursor moves and erase", "a\x1b[2J\x1b[10;20Hb\x1b[K", "ab"},
		{"CSI with intermediate byte", "x\x1b[1 qy", "xy"},
		{"CSI cut off by a control", "\x1b[31\nz", "\nz"},
		{"CSI unterminated at the end", "text\x1b[1;3", "text"},
		{"C1 CSI", "a\u009b31mb", "ab"},
		{"OSC title ended by BEL", "\x1b]0;owned\x07after", "after"},
		{"OSC hyperlink ended by ST", "\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"OSC ended by C1 ST", "\x1b]2;t\u009cafter", "after"},
		{"C1 OSC", "\u009d0;t\x07after", "after"},
		{"OSC cut off by another ESC", "\x1b]0;t\x1b[1mbold", "bold"},
		{"OSC never terminated hides the rest", "seen\x1b]0;and everything after", "seen"},
		{"DCS string", "a\x1bPq#0;2;0;0;0\x1b\\b", "ab"},
		{"APC and PM strings", "a\x1b_apc\x1b\\b\x1b^pm\x1b\\c", "abc"},
		{"two-byte escapes", "\x1b7a\x1b8\x1bcb\x1b=c\x1bMd", "abcd"},
		{"charset designation", "\x1b(Ba\x1b)0b", "ab"},
		{"lone ESC at the end", "a\x1b", "a"},
		{"ESC before a control", "a\x1b\nb", "a\nb"},
		{"BEL removed", "ding\x07!", "ding!"},
		{"other C0 controls removed", "a\x00b\x01c\x0bd\x0ce\x7ff", "abcdef"},
		{"other C1 controls removed", "a\u0085b\u008ec", "abc"},
		{"raw 8-bit CSI is invalid UTF-8", "a\x9b31mb", "a\uFFFD31mb"},
		{"progress overdrawn by CR", "10%\r20%\r100%\n", "100%\n"},
		{"CR overdraws only what it covers", "abcdef\rXY\n", "XYcdef\n"},
		{"CRLF line ends", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"CR at the end keeps the line", "done\r", "done"},
		{"backspace overstrikes", "a\bb", "b"},
		{"underline by overstrike", "_\bA_\bB", "AB"},
		{"backspace at column 0", "\b\bx", "x"},
		{"backspace then append", "abc\b\bX", "aXc"},
		{"CR after multi-byte text", "世界!\r°\n", "°界!\n"},
		{"spinner", "|\r/\r-\r\\\rok\n", "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Sanitize([]byte(tc.in)), "Sanitize(%q)", tc.in)
		})
	}
}

// checkSanitized fails when s is not printable text.
func checkSanitized(t *testing.T, in []byte, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "Sanitize(%q) = %q: not valid UTF-8", in, s)
	for _, r := range s {
		require.False(t, (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r < 0xa0),
			"Sanitize(%q) = %q: control character %U left", in, s, r)
	}
}

// FuzzSanitize: whatever the bytes, Sanitize returns valid UTF-8 with no
// ESC, BEL, backspace, carriage return or other control character but
// newline and tab, and never more runes than the input has bytes.
func FuzzSanitize(f *testing.F) {
	for _, s := range []string{
		"", "plain\n", "\x1b[1;31mred\x1b[0m", "\x1b]0;t\x07", "\x1b]8;;u\x1b\\l", "a\rb\bc\x07",
		"\xff\xfe", "\u009b1m\u009d0;x\u009c", "\x1bP\x1b\\", "\x1b(B", "\x1b", "\xc2", "世界\r!",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := Sanitize(in)
		checkSanitized(t, in, s)
		require.LessOrEqual(t, utf8.RuneCountInString(s), len(in), "Sanitize(%q): more runes than input bytes", in)
		require.False(t, strings.ContainsAny(s, "\x1b\x07\b\r"), "Sanitize(%q) = %q", in, s)
	})
}
