// Package auth holds the principals, roles and grants that the server checks every
// request against (see DESIGN: Authorization). Tokens are bearer secrets stored
// hashed; a token names a principal and carries grants.
package auth

import (
	"context"
	"errors"
	"strings"
)

// Role is what a grant allows in a namespace (and optionally one queue).
type Role string

// Roles. Admin includes every other role in its namespace.
const (
	RoleAdmin    Role = "admin"    // everything in its namespace: namespaces, queues, schedules, tokens
	RoleProducer Role = "producer" // start, cancel, resume, reset runs; send events
	RoleWorker   Role = "worker"   // claim and advance runs of its queues (worker protocol)
	RoleReader   Role = "reader"   // read runs, history, streams, approvals, queues, workers
	RoleApprover Role = "approver" // decide approvals (only those naming it, when they name approvers)
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool {
	switch r {
	case RoleAdmin, RoleProducer, RoleWorker, RoleReader, RoleApprover:
		return true
	}
	return false
}

// AllNamespaces in a grant means every namespace (never __system__).
const AllNamespaces = "*"

// SystemNamespace is reserved: no request addresses it.
const SystemNamespace = "__system__"

// Grant gives Role on Namespace ("*": all) and, when Queue is set, only on that queue.
type Grant struct {
	Role      Role   `json:"role"`
	Namespace string `json:"namespace"`
	Queue     string `json:"queue,omitempty"`
}

// GrantsText is grants as `--grant` takes them, ROLE:NAMESPACE[:QUEUE], joined
// with commas (the CLI's token lists, the audit log's details).
func GrantsText(gs []Grant) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = string(g.Role) + ":" + g.Namespace
		if g.Queue != "" {
			parts[i] += ":" + g.Queue
		}
	}
	return strings.Join(parts, ",")
}

// Principal is who a request acts as: the token's name and grants.
type Principal struct {
	Name   string  `json:"name"`
	Grants []Grant `json:"grants"`
}

// Allows reports whether p may act with role on namespace and queue (queue ""
// when the action concerns no particular queue: then a grant restricted to a
// queue does not allow it). Admin on a namespace allows every role there.
func (p *Principal) Allows(role Role, namespace, queue string) bool {
	if p == nil || namespace == SystemNamespace {
		return false
	}
	for _, g := range p.Grants {
		if g.Namespace != AllNamespaces && g.Namespace != namespace {
			continue
		}
		if g.Role != role && g.Role != RoleAdmin {
			continue
		}
		if g.Queue == "" || g.Queue == queue {
			return true
		}
	}
	return false
}

// ErrUnauthenticated: no token, or a token that is unknown or revoked.
var ErrUnauthenticated = errors.New("unauthenticated")

// Authenticator finds the principal of a bearer token.
type Authenticator interface {
	// Authenticate returns the principal of token, or an error wrapping
	// ErrUnauthenticated.
	Authenticate(ctx context.Context, token string) (*Principal, error)
}

// SubjectAuthenticator is an Authenticator that also finds the principal of a
// verified client certificate by its Subject (mutual TLS).
type SubjectAuthenticator interface {
	// AuthenticateSubject returns the principal whose token holds subject (RFC
	// 2253, x509 Name.String()), or an error wrapping ErrUnauthenticated.
	AuthenticateSubject(ctx context.Context, subject string) (*Principal, error)
}

// Forgetter is an Authenticator that caches principals and can drop a token's
// at once, so that a change made through this process (a revocation, a
// rotation) takes effect here without waiting for the cache.
type Forgetter interface {
	// Forget drops what is cached of the token named name, and every cached
	// refusal.
	Forget(name string)
}
