package store

import (
	"fmt"
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/trellis-dev/trellis/internal/auth"
)

// Names: the one rule for what namespaces, queues, tokens, schedules and
// workflows may be called, used by the store's validation, the server and the
// CLI (docs/http-api.md, "Names"). A name is addressed in URL paths
// (/v1/namespaces/{ns}/queues/{queue}), written in grants
// (ROLE:NAMESPACE[:QUEUE]) and shown in lists, so it holds no '/' nor '\'
// (another path), no '*' (a grant's namespace "*" means every namespace: no
// name may look like a pattern), no white space, control or format character
// (invisible or misleading in a list), and is not "." or ".." (a path segment
// that cleaning would remove).

// MaxNameLen caps the name of a queue, schedule or workflow.
const MaxNameLen = 200

// MaxTokenNameLen caps a token's name.
const MaxTokenNameLen = 100

// NamespacePattern is what a namespace may be called: 1 to 63 letters, digits,
// '.', '_' or '-', starting with a letter or digit (so never the reserved
// auth.SystemNamespace).
var NamespacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidateNamespace checks a namespace's name (NamespacePattern), wrapping
// ErrInvalidParams.
func ValidateNamespace(name string) error {
	return invalid("", namespaceProblem(name))
}

// ValidateName checks the name of a queue, schedule or workflow (what says
// which): 1 to MaxNameLen bytes of UTF-8, printable characters other than
// white space, '/', '\' and '*', not "." nor "..". It wraps ErrInvalidParams.
func ValidateName(what, name string) error {
	return invalid("", nameProblem(what, name, MaxNameLen))
}

// ValidateTokenName checks a token's name: a name by ValidateName's rule of at
// most MaxTokenNameLen bytes.
func ValidateTokenName(name string) error {
	return invalid("", nameProblem("token", name, MaxTokenNameLen))
}

// ValidateGrant checks one grant: a known role on a namespace named by
// ValidateNamespace, or on every namespace ("*", the only pattern of a grant),
// optionally restricted to a queue named by ValidateName.
func ValidateGrant(g auth.Grant) error {
	switch {
	case !g.Role.Valid():
		return invalid("Grants: ", fmt.Sprintf("unknown role %q (admin, producer, worker, reader, approver)", g.Role))
	case g.Namespace == "":
		return invalid("Grants: ", fmt.Sprintf("namespace is required (%q for all)", auth.AllNamespaces))
	case g.Namespace != auth.AllNamespaces:
		if p := namespaceProblem(g.Namespace); p != "" {
			return invalid("Grants: ", fmt.Sprintf("%s (or %q for all)", p, auth.AllNamespaces))
		}
	}
	if g.Queue != "" {
		return invalid("Grants: ", nameProblem("queue", g.Queue, MaxNameLen))
	}
	return nil
}

// invalid is ErrInvalidParams with prefix and problem, or nil when problem is
// "".
func invalid(prefix, problem string) error {
	if problem == "" {
		return nil
	}
	return fmt.Errorf("%w: %s%s", ErrInvalidParams, prefix, problem)
}

// namespaceProblem says what is wrong with a namespace's name, "" if nothing.
func namespaceProblem(name string) string {
	switch {
	case name == "":
		return "namespace name is required"
	case name == auth.SystemNamespace:
		return fmt.Sprintf("namespace %q is reserved", name)
	case !NamespacePattern.MatchString(name):
		return fmt.Sprintf("namespace name %q: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return ""
}

// nameProblem says what is wrong with the name of a what, "" if nothing.
func nameProblem(what, name string, max int) string {
	switch {
	case name == "":
		return what + " name is required"
	case len(name) > max:
		return fmt.Sprintf("%s name is longer than %d bytes", what, max)
	case !utf8.ValidString(name):
		return fmt.Sprintf("%s name %q is not UTF-8", what, name)
	case name == "." || name == "..":
		return fmt.Sprintf("%s name %q: not a path segment of its own", what, name)
	}
	for _, r := range name {
		if r == '/' || r == '\\' || r == '*' || unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return fmt.Sprintf("%s name %q: no '/', '\\', '*', white space or control characters", what, name)
		}
	}
	return ""
}
