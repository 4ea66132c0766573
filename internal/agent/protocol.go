// Package agent is runbox's in-session agent: a small static program that
// runs as PID 1 of a Docker session, starts the session's lifetime process,
// reaps orphans, and runs commands on request over one multiplexed
// connection. It makes commands fast (no Engine round trips per command)
// and killable (the Engine's exec API cannot signal a process).
//
// This file defines the wire protocol, shared by the agent and its client.
// A connection carries frames:
//
//	version:1 type:1 id:4 length:4 payload:length
//
// all integers big-endian. id names a command (0 is the connection itself).
// Payloads are bounded by MaxPayload; a frame that is malformed, oversized
// or of another version ends the connection with an error, never a panic.
package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
)

// Version is the protocol version this package speaks. Version 2 added
// authentication (Hello nonces and proofs, TypeAuth) and start requests
// spread over several frames (TypeStartPart).
const Version = 2

// MaxPayload bounds one frame's payload.
const MaxPayload = 1 << 20

// headerSize is the fixed frame header length.
const headerSize = 10

// Type is a frame's kind.
type Type uint8

// Frame types. "c→a" frames go from the client to the agent, "a→c" back.
const (
	TypeHello       Type = iota + 1 // both ways, id 0: JSON Hello
	TypeStart                       // c→a: JSON StartRequest
	TypeStarted                     // a→c: JSON Started
	TypeStartFailed                 // a→c: JSON StartFailed; the command is over
	TypeStdin                       // c→a: bytes for the command's stdin
	TypeStdinEOF                    // c→a: close the command's stdin
	TypeStdout                      // a→c: bytes the command wrote to stdout
	TypeStderr                      // a→c: bytes the command wrote to stderr
	TypeResize                      // c→a: JSON Resize
	TypeSignal                      // c→a: JSON Signal, to the command's process group
	TypeCancel                      // c→a: kill the command's process group
	TypeExit                        // a→c: JSON Exit; the command is over
	TypeError                       // a→c, id 0: JSON Fatal; the agent ends the connection
	TypeStdinAck                    // a→c: JSON StdinAck; stdin bytes handed to the command
	TypeAuth                        // c→a, id 0: JSON Auth, the client's proof of the session key
	TypeStartPart                   // c→a: leading bytes of a start request too large for one frame
	TypeLease                       // c→a, id 0: JSON Lease, renew or release the session's lease
	typeEnd                         // first invalid type
)

var typeNames = [...]string{"invalid", "hello", "start", "started", "start-failed", "stdin",
	"stdin-eof", "stdout", "stderr", "resize", "signal", "cancel", "exit", "error", "stdin-ack", "auth", "start-part", "lease"}

// String returns the type's name.
func (t Type) String() string {
	if t < typeEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// DefaultSocket is where the agent listens inside a session reached
// through a remote Engine.
const DefaultSocket = "/dev/.runbox/run/agent.sock"

// ErrProtocol reports a malformed frame or an unexpected message.
var ErrProtocol = errors.New("runbox/agent: protocol error")

// Frame is one protocol message.
type Frame struct {
	Type    Type
	ID      uint32
	Payload []byte
}

// Hello opens a connection in both directions.
type Hello struct {
	Version int `json:"version"`
	// Pid is the agent's process ID (in the session); 1 when it is init.
	Pid int `json:"pid,omitempty"`
	// Nonce is the sender's fresh challenge (NonceSize bytes).
	Nonce []byte `json:"nonce,omitempty"`
	// Proof is the agent's answer to the client's nonce when the session
	// has a key: see AgentProof. Empty on a keyless connection.
	Proof []byte `json:"proof,omitempty"`
	// NoStdin, in the agent's hello, says that it honours
	// StartRequest.NoStdin. Agents of the same protocol version that
	// predate it leave it unset, and are sent the stdin-eof frame.
	NoStdin bool `json:"noStdin,omitempty"`
	// Discard, in the agent's hello, says that it honours
	// StartRequest.DiscardStdout and DiscardStderr.
	Discard bool `json:"discard,omitempty"`
}

// Lease renews or releases the session's lease. A leased session ends
// when no caller renewed it for its time to live: the agent kills every
// process and exits, and the Engine removes the container. Every
// connection renews the lease once, at its handshake.
type Lease struct {
	// Release makes the session persistent: it no longer expires.
	Release bool `json:"release,omitempty"`
}

// Auth is the client's answer to the agent's nonce: see ClientProof.
type Auth struct {
	Proof []byte `json:"proof"`
}

// MaxStartRequest bounds the encoded size of one start request, however
// many frames carry it. It is well above what Linux can exec (argument and
// environment strings together are capped at 6 MiB), so that only the
// kernel decides what is too big to run, even when JSON escaping inflates
// the strings.
const MaxStartRequest = 48 << 20

// StartRequest asks the agent to start a command.
type StartRequest struct {
	Args     []string `json:"args"`
	Env      []string `json:"env,omitempty"`
	CleanEnv bool     `json:"cleanEnv,omitempty"`
	Dir      string   `json:"dir,omitempty"`
	TTY      bool     `json:"tty,omitempty"`
	Rows     uint16   `json:"rows,omitempty"`
	Cols     uint16   `json:"cols,omitempty"`
	// User runs the command as "user[:group]" (names or numbers, resolved
	// in the session's /etc/passwd and /etc/group); "" as the agent's user.
	User string `json:"user,omitempty"`
	// NoStdin starts the command with its stdin already at end of file
	// and skips the started frame: a command that takes no input then
	// costs one frame each way, the start and the exit. Only for agents
	// whose hello said NoStdin; never with TTY.
	NoStdin bool `json:"noStdin,omitempty"`
	// DiscardStdout and DiscardStderr give the command /dev/null for that
	// stream: the caller takes none of it, so none crosses the connection
	// (os/exec does the same for a nil Stdout). Only for agents whose
	// hello said Discard; never with TTY.
	DiscardStdout bool `json:"discardStdout,omitempty"`
	DiscardStderr bool `json:"discardStderr,omitempty"`
}

// Started reports the command's process ID in the session.
type Started struct {
	Pid int `json:"pid"`
}

// StartFailed reports why a command could not be started.
type StartFailed struct {
	Error string `json:"error"`
	// Reason classifies a failure to find or execute the program:
	// ReasonNotFound or ReasonNotExecutable; "" for any other failure.
	Reason string `json:"reason,omitempty"`
}

// Reasons a program could not be started, as StartFailed.Reason says.
const (
	// ReasonNotFound: no such program (docker's exit status 127).
	ReasonNotFound = "not-found"
	// ReasonNotExecutable: the program exists but cannot be executed
	// (docker's exit status 126).
	ReasonNotExecutable = "not-executable"
)

// Resize sets a command's terminal size.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Signal asks for a signal (by number) to the command's process group.
type Signal struct {
	Signal int `json:"signal"`
}

// Exit reports how a command ended. Signal names the signal that killed it
// ("SIGKILL"), empty for a normal exit.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// StdinAck returns stdin credit: the client keeps at most StdinWindow
// unacknowledged stdin bytes in flight, so that a command that does not
// read its input can never stall the connection (and with it a cancel).
type StdinAck struct {
	Bytes int `json:"bytes"`
}

// StdinWindow is the most stdin data a client may have unacknowledged.
const StdinWindow = 1 << 20

// Fatal is the agent's last word on a broken connection.
type Fatal struct {
	Error string `json:"error"`
	// Ended says that the whole session ends, not just this connection.
	Ended bool `json:"ended,omitempty"`
	// Status is the lifetime process's exit status when its end ended
	// the session (128+N for signal N).
	Status *int `json:"status,omitempty"`
}

// WriteFrame writes one frame. It is not safe for concurrent use on the
// same writer; callers serialize. The payload is not copied: header and
// payload go out in one vectored write where the writer supports it.
func WriteFrame(w io.Writer, f Frame) error {
	if len(f.Payload) > MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrProtocol, len(f.Payload), MaxPayload)
	}
	var hdr [headerSize]byte
	hdr[0] = Version
	hdr[1] = byte(f.Type)
	binary.BigEndian.PutUint32(hdr[2:6], f.ID)
	binary.BigEndian.PutUint32(hdr[6:10], uint32(len(f.Payload)))
	if len(f.Payload) == 0 {
		_, err := w.Write(hdr[:])
		return err
	}
	bufs := net.Buffers{hdr[:], f.Payload}
	_, err := bufs.WriteTo(w)
	return err
}

// WriteJSON writes a frame whose payload is v encoded as JSON.
func WriteJSON(w io.Writer, t Type, id uint32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteFrame(w, Frame{Type: t, ID: id, Payload: b})
}

// Reader decodes frames from a stream, reusing one buffer: a frame's
// Payload is valid only until the next call to Next.
type Reader struct {
	r   io.Reader
	hdr [headerSize]byte
	buf []byte
}

// NewReader returns a frame decoder for r. It buffers r, so that a frame
// header costs no read of its own.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 256<<10)} }

// Next reads the next frame. It returns io.EOF at a clean end of stream
// (between frames) and an error wrapping ErrProtocol for anything malformed.
func (fr *Reader) Next() (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: truncated header", ErrProtocol)
		}
		return Frame{}, err
	}
	if fr.hdr[0] != Version {
		return Frame{}, fmt.Errorf("%w: version %d, want %d", ErrProtocol, fr.hdr[0], Version)
	}
	t := Type(fr.hdr[1])
	if t == 0 || t >= typeEnd {
		return Frame{}, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, fr.hdr[1])
	}
	n := binary.BigEndian.Uint32(fr.hdr[6:10])
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: frame of %d bytes exceeds %d", ErrProtocol, n, MaxPayload)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	payload := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		return Frame{}, fmt.Errorf("%w: truncated payload: %w", ErrProtocol, err)
	}
	return Frame{Type: t, ID: binary.BigEndian.Uint32(fr.hdr[2:6]), Payload: payload}, nil
}

// Decode unmarshals a JSON payload, wrapping failures in ErrProtocol.
func Decode(f Frame, v any) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return fmt.Errorf("%w: %s frame: %w", ErrProtocol, f.Type, err)
	}
	return nil
}
