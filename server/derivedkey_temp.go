package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"sync"
)

// TEMPORARY, until the lead's "server key" commit on main gives
// (*Server).derivedKey: a key derived from a secret that the servers of one
// store share, kept in the store. Until then, a random secret per store value
// in this process (servers in one process on one Backend share it; servers of
// one store in other processes do not: their page tokens do not work across
// them). Drop this file when rebasing onto that commit.
var tempServerSecrets sync.Map // store.Store → []byte

// derivedKey is a 32-byte key for label, derived from the store's server
// secret.
func (s *Server) derivedKey(label string) []byte {
	fresh := make([]byte, 32)
	_, _ = rand.Read(fresh)
	secret, _ := tempServerSecrets.LoadOrStore(s.store, fresh)
	m := hmac.New(sha256.New, secret.([]byte))
	m.Write([]byte("trellis derived key\x00" + label))
	return m.Sum(nil)
}
