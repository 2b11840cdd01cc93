package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The web UI's sessions are sealed cookies: the token the user signed in with,
// a random session ID, a random CSRF seed and an expiry, encrypted and
// authenticated with AES-256-GCM under the server's UI key (Config.UIKey). The
// cookie is HttpOnly (no script reads it), SameSite=Strict, and Secure when the
// client reached the server over TLS (directly or through a trusted proxy,
// proxy.go); without the key it can be neither read nor forged. Every request
// re-authenticates the sealed token, so revoking the token or changing its
// grants takes effect on the next page. Signing out clears the cookie and
// records the session's ID as ended in the store until its expiry
// (ui_signout.go), so that a copy of the cookie is refused by every server of
// the store. Nothing else is stored server-side, so any server holding the same
// key serves the session (a key made at start, the default, ends sessions when
// the process restarts).

const (
	sessionCookie = "trellis_session"
	// sessionTTL is how long a session lasts after sign-in.
	sessionTTL = 12 * time.Hour
	// UIKeySize is the size of Config.UIKey.
	UIKeySize = 32
	// sessionIDSize is the size of a session's random ID.
	sessionIDSize = 16
)

// session is the sealed content of the session cookie.
type session struct {
	Token   string    `json:"t"`
	ID      []byte    `json:"i"` // recorded when the session is signed out (ui_signout.go)
	Seed    []byte    `json:"s"` // the CSRF token is derived from it (csrfToken)
	Expires time.Time `json:"e"`
}

// uiKeys are the keys of the UI: one seals cookies, one derives CSRF tokens.
type uiKeys struct {
	aead cipher.AEAD
	csrf []byte
}

func newUIKeys(key []byte) (*uiKeys, error) {
	if key == nil {
		key = make([]byte, UIKeySize)
		rand.Read(key)
	}
	if len(key) != UIKeySize {
		return nil, fmt.Errorf("server config: UIKey is %d bytes, want %d", len(key), UIKeySize)
	}
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	block, err := aes.NewCipher(derive("trellis ui session seal"))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &uiKeys{aead: aead, csrf: derive("trellis ui csrf")}, nil
}

// seal encrypts a session into a cookie value.
func (k *uiKeys) seal(s *session) (string, error) {
	plain, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, k.aead.NonceSize())
	rand.Read(nonce)
	sealed := k.aead.Seal(nonce, nonce, plain, []byte(sessionCookie))
	return base64.RawURLEncoding.EncodeToString(sealed), nil
}

// open decrypts a cookie value; it fails on a forged, altered or expired one.
func (k *uiKeys) open(v string, now time.Time) (*session, error) {
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return nil, errors.New("malformed session cookie")
	}
	n := k.aead.NonceSize()
	plain, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(sessionCookie))
	if err != nil {
		return nil, errors.New("session cookie does not open with this server's key")
	}
	var s session
	if err := json.Unmarshal(plain, &s); err != nil || len(s.ID) != sessionIDSize {
		return nil, errors.New("malformed session") // or sealed before sessions had an ID: sign in again
	}
	if !now.Before(s.Expires) {
		return nil, errors.New("session expired")
	}
	return &s, nil
}

// csrfToken is the token the session's forms carry.
func (k *uiKeys) csrfToken(s *session) string {
	m := hmac.New(sha256.New, k.csrf)
	m.Write(s.Seed)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF refuses a mutating request that does not come from a page of this
// server: its Origin (or, without one, its Referer) must be this scheme (the
// one the client used, see Server.scheme) and host, and its form must carry
// the session's CSRF token (s nil: no token to check, as on the sign-in form).
func (k *uiKeys) checkCSRF(r *http.Request, s *session, scheme string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		if ref, err := url.Parse(r.Header.Get("Referer")); err == nil && ref.Host != "" {
			origin = ref.Scheme + "://" + ref.Host
		}
	}
	if origin == "" || !sameOrigin(origin, scheme, r.Host) {
		return fmt.Errorf("%w: cross-site request refused (Origin %q, this server %s://%s)", ErrPermissionDenied, origin, scheme, r.Host)
	}
	if s == nil {
		return nil
	}
	got := r.PostFormValue("csrf")
	if subtle.ConstantTimeCompare([]byte(got), []byte(k.csrfToken(s))) != 1 {
		return fmt.Errorf("%w: missing or wrong CSRF token: reload the page", ErrPermissionDenied)
	}
	return nil
}

// sameOrigin reports whether origin (scheme://host[:port]) is scheme and host.
func sameOrigin(origin, scheme, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Scheme == scheme && strings.EqualFold(u.Host, host)
}

// newSession starts a session for token.
func newSession(token string, now time.Time) *session {
	id, seed := make([]byte, sessionIDSize), make([]byte, 16)
	rand.Read(id)
	rand.Read(seed)
	return &session{Token: token, ID: id, Seed: seed, Expires: now.Add(sessionTTL)}
}

// setSessionCookie writes the sealed session (s nil clears it), Secure when
// the client reached the server over TLS.
func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, sess *session) error {
	return s.ui.setSessionCookie(w, sess, s.overTLS(r))
}

// setSessionCookie writes the sealed session; s nil clears it.
func (k *uiKeys) setSessionCookie(w http.ResponseWriter, s *session, secure bool) error {
	c := &http.Cookie{Name: sessionCookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: secure}
	if s == nil {
		c.MaxAge = -1
	} else {
		v, err := k.seal(s)
		if err != nil {
			return err
		}
		c.Value, c.Expires = v, s.Expires
	}
	http.SetCookie(w, c)
	return nil
}
