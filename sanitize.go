package runbox

import (
	"strings"
	"unicode/utf8"
)

// Sanitize returns a command's raw output as text that is safe to print,
// log or hand to a model: valid UTF-8 (each invalid byte becomes U+FFFD)
// with no terminal control sequences left in it.
//
// Escape sequences (CSI such as colours and cursor moves, OSC such as
// window titles and hyperlinks, DCS/SOS/PM/APC strings, and the short
// ESC forms), their 8-bit C1 equivalents, BEL and every other control
// character except newline and tab are removed. Carriage returns and
// backspaces are applied the way a terminal shows them: "10%\r20%\n"
// becomes "20%\n" and "a\bb" becomes "b" (one column per character, so
// wide characters may overdraw differently than on a screen). A string
// sequence that is never terminated hides the rest of the output, as it
// would on a terminal; the raw bytes stay available to a caller who
// needs them.
func Sanitize(raw []byte) string {
	var out strings.Builder
	out.Grow(len(raw))
	// The current line as cells, so that a carriage return or a backspace
	// can overdraw in place.
	var line []rune
	col := 0
	flush := func() {
		for _, r := range line {
			out.WriteRune(r)
		}
		line, col = line[:0], 0
	}
	for i := 0; i < len(raw); {
		r, n := utf8.DecodeRune(raw[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			r = utf8.RuneError // an invalid byte is shown as U+FFFD
		case r == '\n':
			flush()
			out.WriteByte('\n')
			continue
		case r == '\r':
			col = 0
			continue
		case r == '\b':
			col = max(col-1, 0)
			continue
		case r == 0x1b:
			i = skipEscape(raw, i)
			continue
		case r == 0x9b: // C1 CSI
			i = skipCSI(raw, i)
			continue
		case r == 0x90 || r == 0x98 || r == 0x9d || r == 0x9e || r == 0x9f: // C1 DCS, SOS, OSC, PM, APC
			i = skipString(raw, i)
			continue
		case r < 0x20 && r != '\t', r >= 0x7f && r < 0xa0:
			continue // BEL, NUL, DEL, C1 and the other controls
		}
		if col < len(line) {
			line[col] = r
		} else {
			line = append(line, r)
		}
		col++
	}
	flush()
	return out.String()
}

// skipEscape skips the sequence introduced by an ESC just before raw[i]
// and returns where ordinary text resumes. A byte that cannot belong to
// the sequence ends it and is read again as text.
func skipEscape(raw []byte, i int) int {
	if i >= len(raw) {
		return i
	}
	switch c := raw[i]; {
	case c == '[':
		return skipCSI(raw, i+1)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return skipString(raw, i+1)
	case c >= 0x20 && c <= 0x2f: // intermediates, then one final byte
		for i < len(raw) && raw[i] >= 0x20 && raw[i] <= 0x2f {
			i++
		}
		if i < len(raw) && raw[i] >= 0x30 && raw[i] <= 0x7e {
			i++
		}
		return i
	case c >= 0x30 && c <= 0x7e: // a two-byte sequence: ESC 7, ESC c, ESC =
		return i + 1
	}
	return i // a lone ESC
}

// skipCSI skips a control sequence's parameter and intermediate bytes and
// its final byte, starting just after the introducer.
func skipCSI(raw []byte, i int) int {
	for i < len(raw) && raw[i] >= 0x20 && raw[i] <= 0x3f {
		i++
	}
	if i < len(raw) && raw[i] >= 0x40 && raw[i] <= 0x7e {
		i++
	}
	return i
}

// skipString skips a string sequence (OSC, DCS, SOS, PM, APC) up to and
// including its terminator: BEL, ESC \ or the C1 ST. Another ESC ends the
// string and starts a new sequence, as in xterm.
func skipString(raw []byte, i int) int {
	for i < len(raw) {
		switch {
		case raw[i] == 0x07:
			return i + 1
		case raw[i] == 0x1b:
			if i+1 < len(raw) && raw[i+1] == '\\' {
				return i + 2
			}
			return i
		case raw[i] == 0xc2 && i+1 < len(raw) && raw[i+1] == 0x9c: // U+009C ST
			return i + 2
		}
		i++
	}
	return i
}
