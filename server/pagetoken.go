package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/secrets"
)

// Page tokens (docs/http-api.md, "Page tokens"): a list's next_page_token is
// the store's cursor (a run's or approval's sequence, global to the store)
// sealed with AES-256-GCM under a key derived from the secret the servers of a
// store share (secrets.Keys.Derive), with the list, the namespace and the list's
// filter in the authenticated data. A client learns nothing from a token (not
// how many runs other namespaces hold), cannot make one, and cannot use one
// with another namespace, filter or store: each is refused 400
// invalid_argument. The page size (limit) is not bound: a client may change it
// from page to page.

// pageTokenVersion starts every token, so that another format can follow.
const pageTokenVersion = 1

// pageTokenLabel names the key of page tokens among the derived keys.
const pageTokenLabel = "trellis page tokens v1"

// errPageToken is the one answer to a token that does not open: which of
// altered, foreign or of another filter it is, is not told.
var errPageToken = fmt.Errorf("%w: page_token: not a token of this list (a token is bound to the namespace and filter of the list it came from, on this store)", ErrInvalidArgument)

// newPageCipher is the AEAD of page tokens, under the key of label derived
// from the store's root key (so every server of the store opens them).
func newPageCipher(keys *secrets.Keys) (cipher.AEAD, error) {
	block, err := aes.NewCipher(keys.Derive(pageTokenLabel))
	if err != nil {
		return nil, fmt.Errorf("making the page token key: %w", err)
	}
	return cipher.NewGCM(block)
}

// sealPage turns a store cursor of list in namespace ns, listed with filter,
// into a page token; "" stays "" (the last page).
func (s *Server) sealPage(list, ns string, filter any, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	aead := s.pageAEAD
	ad, err := pageAD(list, ns, filter)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1+aead.NonceSize(), 1+aead.NonceSize()+len(cursor)+aead.Overhead())
	buf[0] = pageTokenVersion
	if _, err := rand.Read(buf[1:]); err != nil {
		return "", fmt.Errorf("sealing a page token: %w", err)
	}
	buf = aead.Seal(buf, buf[1:], []byte(cursor), ad)
	return base64.RawURLEncoding.EncodeToString(buf), nil
}

// openPage returns the store cursor a page token of list in namespace ns,
// listed with filter, holds; "" for "" (the first page). A token that is
// altered, or was sealed for another list, namespace, filter or store, is
// errPageToken.
func (s *Server) openPage(list, ns string, filter any, token string) (string, error) {
	if token == "" {
		return "", nil
	}
	aead := s.pageAEAD
	ad, err := pageAD(list, ns, filter)
	if err != nil {
		return "", err
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 1+aead.NonceSize()+aead.Overhead() || raw[0] != pageTokenVersion {
		return "", errPageToken
	}
	nonce, sealed := raw[1:1+aead.NonceSize()], raw[1+aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, sealed, ad)
	if err != nil {
		return "", errPageToken
	}
	return string(plain), nil
}

// pageAD is the authenticated data of a token: what it is bound to.
func pageAD(list, ns string, filter any) ([]byte, error) {
	f, err := json.Marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("encoding a page token's filter: %w", err)
	}
	return fmt.Appendf(nil, "trellis page token\x00%s\x00%s\x00%s", list, ns, f), nil
}

// runsFilter is what a page token of the runs list is bound to: the
// filter of trellis.ListOptions, in a canonical form (a set of statuses, times
// to the nanosecond), whether it came from the API's query or the UI's.
type runsFilter struct {
	Statuses      []string `json:"s,omitempty"`
	Workflow      string   `json:"w,omitempty"`
	WorkflowID    string   `json:"i,omitempty"`
	Queue         string   `json:"q,omitempty"`
	CreatedAfter  int64    `json:"a,omitempty"`
	CreatedBefore int64    `json:"b,omitempty"`
}

func runsFilterOf(o trellis.ListOptions) runsFilter {
	f := runsFilter{Workflow: o.Workflow, WorkflowID: o.WorkflowID, Queue: o.Queue,
		CreatedAfter: unixNano(o.CreatedAfter), CreatedBefore: unixNano(o.CreatedBefore)}
	for _, st := range o.Statuses {
		f.Statuses = append(f.Statuses, string(st))
	}
	slices.Sort(f.Statuses)
	f.Statuses = slices.Compact(f.Statuses)
	return f
}

// approvalsFilter is what a page token of the approvals list is bound to.
type approvalsFilter struct {
	Statuses []string `json:"s,omitempty"`
	Run      string   `json:"r,omitempty"`
}

func approvalsFilterOf(f trellis.ApprovalFilter) approvalsFilter {
	a := approvalsFilter{Run: f.Run}
	for _, st := range f.Statuses {
		a.Statuses = append(a.Statuses, string(st))
	}
	slices.Sort(a.Statuses)
	a.Statuses = slices.Compact(a.Statuses)
	return a
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
