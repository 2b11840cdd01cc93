package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
)

// TokenPrefix starts every token's secret, so a leaked one is recognisable (in
// logs, by secret scanners).
const TokenPrefix = "trl_"

// secretSize is the number of random bytes of a secret.
const secretSize = 32

// NewToken returns a fresh secret — TokenPrefix and 32 random bytes in unpadded
// base64url — and its hash, the only thing to store. The secret is shown once.
func NewToken() (secret string, hash []byte, err error) {
	b := make([]byte, secretSize)
	if _, err := rand.Read(b); err != nil {
		return "", nil, fmt.Errorf("making token: %w", err)
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, HashToken(secret), nil
}

// HashToken is the hash under which a token's secret is stored and looked up:
// SHA-256 of the whole secret. A fast hash is right here, unlike for passwords: a
// secret is 256 random bits, so no guessing or precomputation can find it from its
// hash, and a slow hash would only slow down every request.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// LooksLikeToken reports whether s has the shape of a secret NewToken makes (a
// cheap check before any lookup).
func LooksLikeToken(s string) bool {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(rest) != base64.RawURLEncoding.EncodedLen(secretSize) {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}
