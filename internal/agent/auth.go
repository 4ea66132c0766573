package agent

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
)

// A session key authenticates both ends of a connection that crosses the
// session's filesystem (the exec bridge of a remote Engine), where a
// process in the session could take the agent's place. Each side proves
// knowledge of the key over both nonces; the key itself never crosses the
// connection.

// KeySize is the length of a session key.
const KeySize = 32

// NonceSize is the length of a handshake nonce.
const NonceSize = 32

// ErrAuth reports a peer that failed to prove the session key.
var ErrAuth = errors.New("runbox/agent: authentication failed")

// NewKey returns a fresh random session key.
func NewKey() []byte { return random(KeySize) }

func random(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("runbox/agent: no randomness: " + err.Error())
	}
	return b
}

// proof is HMAC-SHA256(key, role || first || second). Distinct roles keep
// one side's proof from being replayed as the other's.
func proof(key []byte, role string, first, second []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(role))
	m.Write([]byte{0})
	m.Write(first)
	m.Write(second)
	return m.Sum(nil)
}

// AgentProof is the agent's answer to the client's nonce.
func AgentProof(key, clientNonce, agentNonce []byte) []byte {
	return proof(key, "runbox agent", clientNonce, agentNonce)
}

// ClientProof is the client's answer to the agent's nonce.
func ClientProof(key, clientNonce, agentNonce []byte) []byte {
	return proof(key, "runbox client", agentNonce, clientNonce)
}
