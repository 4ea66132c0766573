package agent

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteFrame(&buf, Frame{Type: TypeStdout, ID: 7, Payload: []byte("hello")}))
	require.NoError(t, WriteJSON(&buf, TypeExit, 7, Exit{Code: 3, Signal: "SIGTERM"}))
	require.NoError(t, WriteFrame(&buf, Frame{Type: TypeStdinEOF, ID: 9}))
	r := NewReader(&buf)
	f, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, TypeStdout, f.Type)
	assert.Equal(t, uint32(7), f.ID)
	assert.Equal(t, "hello", string(f.Payload))
	f, err = r.Next()
	require.NoError(t, err)
	var ex Exit
	require.NoError(t, Decode(f, &ex))
	assert.Equal(t, Exit{Code: 3, Signal: "SIGTERM"}, ex)
	f, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, TypeStdinEOF, f.Type)
	assert.Empty(t, f.Payload)
	_, err = r.Next()
	assert.ErrorIs(t, err, io.EOF)
}

func TestMalformedFramesAreErrors(t *testing.T) {
	header := func(v, typ byte, n uint32) []byte {
		return []byte{v, typ, 0, 0, 0, 1, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	cases := map[string][]byte{
		"wrong version":     header(Version+1, byte(TypeStdout), 0),
		"unknown type":      header(Version, 200, 0),
		"zero type":         header(Version, 0, 0),
		"oversized":         header(Version, byte(TypeStdout), MaxPayload+1),
		"truncated header":  {Version, byte(TypeStdout), 0},
		"truncated payload": append(header(Version, byte(TypeStdout), 10), 'x'),
	}
	for name, b := range cases {
		_, err := NewReader(bytes.NewReader(b)).Next()
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
	assert.ErrorIs(t, WriteFrame(io.Discard, Frame{Type: TypeStdout, Payload: make([]byte, MaxPayload+1)}), ErrProtocol)
	assert.ErrorIs(t, Decode(Frame{Type: TypeStart, Payload: []byte("{")}, &StartRequest{}), ErrProtocol)
}

func FuzzReader(f *testing.F) {
	var seed bytes.Buffer
	_ = WriteJSON(&seed, TypeStart, 1, StartRequest{Args: []string{"true"}})
	_ = WriteFrame(&seed, Frame{Type: TypeStdin, ID: 1, Payload: []byte("data")})
	f.Add(seed.Bytes())
	f.Add([]byte{Version, byte(TypeExit), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for range 64 {
			f, err := r.Next()
			if err != nil {
				require.True(t, errors.Is(err, io.EOF) || errors.Is(err, ErrProtocol), "unexpected error kind: %v", err)
				return
			}
			require.LessOrEqual(t, len(f.Payload), MaxPayload, "payload of an accepted frame")
			require.True(t, f.Type != 0 && f.Type < typeEnd, "invalid frame accepted: %v", f.Type)
			// Every JSON payload either decodes or is a protocol error.
			var v StartRequest
			if err := Decode(f, &v); !errors.Is(err, ErrProtocol) {
				require.NoError(t, err)
			}
		}
	})
}
