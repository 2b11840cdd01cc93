package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// AuditStore keeps the audit log: one entry per state change a principal asked
// a server for (docs/security.md, "Audit log"). The server buffers entries and
// appends them in batches, off the path of the requests; entries are deleted
// after their namespace's retention period (internal/retention), like runs.
type AuditStore interface {
	// AuditAppend appends entries in one transaction, in order: all of them or
	// none.
	AuditAppend(ctx context.Context, p *AuditAppendParams) error
	// AuditList lists entries newest first (in the order they were appended),
	// with filters and cursor pagination.
	AuditList(ctx context.Context, p *AuditListParams) (*AuditListResult, error)
	// AuditPurge deletes up to Limit entries of Namespace ("" for the entries
	// of no namespace) whose Time is before Before, oldest first, in one short
	// transaction, and returns how many it deleted: fewer than Limit means none
	// is left.
	AuditPurge(ctx context.Context, p *AuditPurgeParams) (int, error)
	// AuditNamespaces lists the namespaces that have entries, in order; ""
	// (entries of no namespace, such as the tokens') comes first when there
	// are any.
	AuditNamespaces(ctx context.Context) ([]string, error)
}

// AuditEntry is one entry of the audit log: who changed what, when, from
// where, and how it ended. It never holds a payload, a secret or an error's
// text: only names, IDs and codes.
type AuditEntry struct {
	// Time is when the request was answered.
	Time time.Time `json:"time"`
	// Principal is the name of the token (or of the session's token) that
	// made the request; "insecure" on a server without authentication.
	Principal string `json:"principal"`
	// Action names the change, noun first: "run.start", "queue.pause",
	// "token.revoke", ... (the list is in docs/security.md).
	Action string      `json:"action"`
	Target AuditTarget `json:"target"`
	// Outcome is "ok", or the code of the error the request was answered
	// with ("permission_denied", "run_finished", ...).
	Outcome string `json:"outcome"`
	// RequestID is the request's X-Request-Id, as the access log has it.
	RequestID string `json:"request_id"`
	// Source is the address the request came from.
	Source string `json:"source"`
	// Via is "api" (the HTTP API) or "ui" (a form of the web UI).
	Via string `json:"via"`
	// Detail says what the change made when the target does not: the run a
	// reset or a trigger started, how many runs a batch created; "idempotent
	// replay" for a retry answered from its key. Never a payload.
	Detail string `json:"detail,omitempty"`
}

// AuditTarget is what an audited request acted on.
type AuditTarget struct {
	// Namespace is the namespace of the object; "" for objects of no
	// namespace (tokens).
	Namespace string `json:"namespace,omitempty"`
	// Type is the kind of object: run, runs (a batch), approval, namespace,
	// queue, schedule, token or session.
	Type string `json:"type"`
	// ID names the object: a run ID, a queue's or a schedule's name, a
	// token's name, ...; "" when the request was refused before it named one.
	ID string `json:"id,omitempty"`
}

// Limits of the audit store.
const (
	// MaxAuditBatch caps the entries of one AuditAppend.
	MaxAuditBatch = 1000
	// MaxAuditField caps each text field of an entry, in bytes.
	MaxAuditField = 1024
)

// AuditAppendParams are the parameters of AuditAppend.
type AuditAppendParams struct {
	Entries []AuditEntry `json:"entries"`
}

// Validate reports the first malformed entry, wrapping ErrInvalidParams: 1 to
// MaxAuditBatch entries, each with a time, a principal, an action, a target
// type and an outcome, and text fields of at most MaxAuditField bytes of UTF-8
// without NUL.
func (p *AuditAppendParams) Validate() error {
	if n := len(p.Entries); n == 0 || n > MaxAuditBatch {
		return fmt.Errorf("%w: Entries: %d entries (1 to %d)", ErrInvalidParams, n, MaxAuditBatch)
	}
	for i := range p.Entries {
		if err := p.Entries[i].validate(); err != nil {
			return fmt.Errorf("%w: Entries[%d]: %v", ErrInvalidParams, i, err)
		}
	}
	return nil
}

func (e *AuditEntry) validate() error {
	switch {
	case e.Time.IsZero():
		return fmt.Errorf("no Time")
	case e.Principal == "" || e.Action == "" || e.Target.Type == "" || e.Outcome == "":
		return fmt.Errorf("no Principal, Action, Target.Type or Outcome")
	}
	for _, f := range []struct{ name, v string }{
		{"Principal", e.Principal}, {"Action", e.Action}, {"Target.Namespace", e.Target.Namespace},
		{"Target.Type", e.Target.Type}, {"Target.ID", e.Target.ID}, {"Outcome", e.Outcome},
		{"RequestID", e.RequestID}, {"Source", e.Source}, {"Via", e.Via}, {"Detail", e.Detail},
	} {
		if err := checkAuditText(f.v); err != nil {
			return fmt.Errorf("%s: %v", f.name, err)
		}
	}
	return nil
}

// checkAuditText checks a text field of an entry (see MaxAuditField).
func checkAuditText(s string) error {
	switch {
	case len(s) > MaxAuditField:
		return fmt.Errorf("longer than %d bytes", MaxAuditField)
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("holds a NUL byte")
	}
	return nil
}

// AuditListParams are the parameters of AuditList. Zero fields do not filter.
type AuditListParams struct {
	// Namespace keeps the entries of one namespace (never those of no
	// namespace); "" keeps every entry.
	Namespace string `json:"namespace,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Action keeps one action ("run.cancel"), or, ending in ".*", every action
	// of a kind of object ("token.*").
	Action string `json:"action,omitempty"`
	// Since (inclusive) and Until (exclusive) bound the entries' Time.
	Since time.Time `json:"since,omitempty"`
	Until time.Time `json:"until,omitempty"`
	// Limit caps the page size; 0 means DefaultListLimit, at most MaxListLimit.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a previous listing (AuditListResult.NextCursor).
	Cursor string `json:"cursor,omitempty"`
}

// Validate reports a malformed filter, wrapping ErrInvalidParams.
func (p *AuditListParams) Validate() error {
	if _, err := ListLimit(p.Limit); err != nil {
		return err
	}
	if _, err := ParseCursor(p.Cursor); err != nil {
		return err
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Since.Before(p.Until) {
		return fmt.Errorf("%w: Since must be before Until", ErrInvalidParams)
	}
	if a, _ := strings.CutSuffix(p.Action, ".*"); strings.Contains(a, "*") || a == "" && p.Action != "" {
		return fmt.Errorf("%w: Action %q: want an action, or a kind of object followed by \".*\"", ErrInvalidParams, p.Action)
	}
	for _, v := range []string{p.Namespace, p.Principal, p.Action} {
		if err := checkAuditText(v); err != nil {
			return fmt.Errorf("%w: filter: %v", ErrInvalidParams, err)
		}
	}
	return nil
}

// ActionPrefix returns the prefix an Action filter ending in ".*" keeps
// ("token." for "token.*"), or "" for an exact action.
func (p *AuditListParams) ActionPrefix() string {
	if a, ok := strings.CutSuffix(p.Action, "*"); ok {
		return a
	}
	return ""
}

// AuditListResult is one page of AuditList.
type AuditListResult struct {
	Entries []*AuditEntry `json:"entries"`
	// NextCursor is empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AuditPurgeParams are the parameters of AuditPurge.
type AuditPurgeParams struct {
	// Namespace is the namespace whose entries are deleted; "" for the
	// entries of no namespace.
	Namespace string `json:"namespace"`
	// Before is required: entries whose Time is before it are deleted.
	Before time.Time `json:"before"`
	// Limit caps the entries deleted; 0 means DefaultAuditPurgeBatch, at most
	// MaxPurgeBatch.
	Limit int `json:"limit,omitempty"`
}

// DefaultAuditPurgeBatch is the entries one AuditPurge deletes by default:
// entries are small rows, so a batch is larger than a batch of runs.
const DefaultAuditPurgeBatch = 1000

// Validate reports a missing or malformed field, wrapping ErrInvalidParams,
// and fills the default Limit.
func (p *AuditPurgeParams) Validate() error {
	switch {
	case p.Before.IsZero():
		return fmt.Errorf("%w: Before is required", ErrInvalidParams)
	case p.Limit < 0 || p.Limit > MaxPurgeBatch:
		return fmt.Errorf("%w: Limit must be 0 to %d", ErrInvalidParams, MaxPurgeBatch)
	}
	if p.Limit == 0 {
		p.Limit = DefaultAuditPurgeBatch
	}
	return nil
}
