package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
)

const tokensUsage = `Usage: trellis tokens <subcommand> [arguments] (--store URL | --server URL --token T)

Subcommands:
  create    create a token and print its secret, once (--name NAME --grant ROLE:NAMESPACE[:QUEUE] ... [--ttl 720h])
  list      list the tokens: names, grants, when created, expiring, last used and revoked
  rotate    give a token a new secret and print it, once; the old one works for --grace (1h)
  revoke    revoke a token by name, at once and for ever

Tokens are the bearer secrets clients and workers present to "trellis server". The
store keeps only a hash of each secret: a lost secret cannot be shown again (rotate
the token, or revoke it and create another). A token created without --ttl works
until revoked. Roles are admin, producer, worker, reader and approver; a grant's
namespace "*" means every namespace. These commands work on the store directly
(--store), or through a server (--server, also $TRELLIS_SERVER) with an admin token
of every namespace (--token, also $TRELLIS_TOKEN), such as the one "trellis server"
writes to its admin token file on its first start.
`

func runTokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, tokensUsage) }
	if len(args) == 0 {
		return &usageError{msg: "tokens: no subcommand given", cmd: "tokens"}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create":
		return tokensCreate(ctx, rest, stdout, stderr)
	case "list":
		return tokensList(ctx, rest, stdout, stderr)
	case "revoke":
		return tokensRevoke(ctx, rest, stdout, stderr)
	case "rotate":
		return tokensRotate(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("tokens: unknown subcommand %q", sub), cmd: "tokens"}
	}
}

// grantsFlag collects repeated --grant ROLE:NAMESPACE[:QUEUE] flags.
type grantsFlag []auth.Grant

func (g *grantsFlag) String() string { return "" }

func (g *grantsFlag) Set(s string) error {
	parts := strings.SplitN(s, ":", 3) // a queue's name may hold a ':'
	if len(parts) < 2 {
		return fmt.Errorf("%q is not ROLE:NAMESPACE or ROLE:NAMESPACE:QUEUE", s)
	}
	gr := auth.Grant{Role: auth.Role(parts[0]), Namespace: parts[1]}
	if len(parts) == 3 {
		if gr.Queue = parts[2]; gr.Queue == "" {
			return fmt.Errorf("%q: empty queue", s)
		}
	}
	if err := store.ValidateGrant(gr); err != nil {
		return errors.New(strings.TrimPrefix(paramsText(err), "Grants: "))
	}
	*g = append(*g, gr)
	return nil
}

// paramsText is the message of a validation error without its "invalid
// parameters: " prefix.
func paramsText(err error) string {
	return strings.TrimPrefix(err.Error(), store.ErrInvalidParams.Error()+": ")
}

// tokenAdmin manages tokens on a store or through a server (by an admin of
// every namespace): the same commands, the same output.
type tokenAdmin interface {
	// create makes a token and returns its secret.
	create(ctx context.Context, t newToken) (string, error)
	list(ctx context.Context) ([]*store.Token, error)
	revoke(ctx context.Context, name string) (*store.Token, error)
	// rotate gives a token a new secret, returned with the token.
	rotate(ctx context.Context, name string, grace time.Duration) (string, *store.Token, error)
	close() error
}

// newToken is what `tokens create` asks for.
type newToken struct {
	name    string
	grants  []auth.Grant
	ttl     time.Duration // 0: never expires
	subject string        // "": no certificate stands for it
}

// tokenFlags adds --store, --server and --token to a tokens command.
func tokenFlags(fs *flag.FlagSet, t *target) {
	storeFlag(fs, &t.store)
	fs.StringVar(&t.server, "server", "", "a Trellis server's `URL` instead of --store; needs an admin token of every namespace (default $"+envServer+")")
	fs.StringVar(&t.token, "token", "", "the bearer `token` for --server (default $"+envToken+")")
}

// openTokenAdmin opens the store (it must exist: tokens commands create none)
// or a client of the server that t names.
func openTokenAdmin(ctx context.Context, t target) (tokenAdmin, error) {
	if t.server != "" {
		hc, err := httpc.New(httpc.Config{Base: t.server, Token: t.token})
		if err != nil {
			return nil, err
		}
		return &serverTokens{hc}, nil
	}
	st, err := openTokenStore(ctx, t.store)
	if err != nil {
		return nil, err
	}
	return &storeTokens{st}, nil
}

// openTokenStore opens the existing store at url (tokens commands create none).
func openTokenStore(ctx context.Context, url string) (store.Store, error) {
	if err := checkStoreExists(url); err != nil {
		return nil, err
	}
	return trellis.OpenExistingStore(ctx, url, time.Now)
}

// storeTokens manages the tokens of a store directly.
type storeTokens struct{ st store.Store }

func (s *storeTokens) create(ctx context.Context, t newToken) (string, error) {
	secret, hash, err := auth.NewToken()
	if err != nil {
		return "", err
	}
	_, err = s.st.TokenCreate(ctx, &store.TokenCreateParams{Name: t.name, Grants: t.grants, Hash: hash,
		TTL: t.ttl, Subject: t.subject})
	return secret, err
}

func (s *storeTokens) rotate(ctx context.Context, name string, grace time.Duration) (string, *store.Token, error) {
	secret, hash, err := auth.NewToken()
	if err != nil {
		return "", nil, err
	}
	tok, err := s.st.TokenRotate(ctx, &store.TokenRotateParams{Name: name, Hash: hash, Grace: grace})
	return secret, tok, err
}

func (s *storeTokens) list(ctx context.Context) ([]*store.Token, error) { return s.st.TokenList(ctx) }

func (s *storeTokens) revoke(ctx context.Context, name string) (*store.Token, error) {
	return s.st.TokenRevoke(ctx, &store.TokenRevokeParams{Name: name})
}

func (s *storeTokens) close() error { return s.st.Close() }

// serverTokens manages tokens through a server's /v1/tokens routes
// (docs/http-api.md#tokens); the server draws the secret and keeps its hash.
type serverTokens struct{ hc *httpc.Client }

func (s *serverTokens) create(ctx context.Context, t newToken) (string, error) {
	var out server.CreatedToken
	body := server.TokenRequest{Name: t.name, Grants: t.grants, TTL: store.Duration(t.ttl), Subject: t.subject}
	if _, err := s.hc.Do(ctx, httpc.Call{Method: "POST", Path: "/v1/tokens", Body: body, Out: &out}); err != nil {
		return "", err
	}
	return out.Secret, nil
}

func (s *serverTokens) list(ctx context.Context) ([]*store.Token, error) {
	var out server.TokenList
	if _, err := s.hc.Do(ctx, httpc.Call{Method: "GET", Path: "/v1/tokens", Out: &out}); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

func (s *serverTokens) revoke(ctx context.Context, name string) (*store.Token, error) {
	var out store.Token
	call := httpc.Call{Method: "POST", Path: "/v1/tokens/" + url.PathEscape(name) + "/revoke", Out: &out}
	if _, err := s.hc.Do(ctx, call); err != nil {
		return nil, err
	}
	return &out, nil
}

func (s *serverTokens) rotate(ctx context.Context, name string, grace time.Duration) (string, *store.Token, error) {
	var out server.CreatedToken
	g := store.Duration(grace)
	call := httpc.Call{Method: "POST", Path: "/v1/tokens/" + url.PathEscape(name) + "/rotate",
		Body: server.RotateTokenRequest{Grace: &g}, Out: &out}
	if _, err := s.hc.Do(ctx, call); err != nil {
		return "", nil, err
	}
	return out.Secret, out.Token, nil
}

func (s *serverTokens) close() error {
	s.hc.Close()
	return nil
}

func tokensCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens create", "tokens create --name NAME --grant ROLE:NAMESPACE[:QUEUE] ... [--ttl DURATION] [--subject DN] (--store URL | --server URL --token T)",
		"Create a token and print its secret on stdout, once: it cannot be shown again.", stderr)
	var (
		t      target
		nt     newToken
		grants grantsFlag
	)
	tokenFlags(fs, &t)
	fs.StringVar(&nt.name, "name", "", "the token's `name`, unique in the store (required)")
	fs.Var(&grants, "grant", "give the token a role on a namespace (* for all), optionally one queue only:\n`ROLE:NAMESPACE[:QUEUE]`, repeatable, at least one; roles: admin, producer,\nworker, reader, approver")
	fs.DurationVar(&nt.ttl, "ttl", 0, "how long the token works, from now and from each rotation (`duration`, e.g. 720h; default: until revoked)")
	fs.StringVar(&nt.subject, "subject", "", "under mutual TLS, client certificates with this `subject` (RFC 2253, e.g. 'CN=w1,O=team') act as the token")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "tokens create: unexpected argument %q", pos[0])
	case len(grants) == 0:
		return usagef(fs, "tokens create: at least one --grant is required")
	case nt.ttl < 0 || nt.ttl > 0 && nt.ttl < store.MinTokenTTL:
		return usagef(fs, "tokens create: --ttl %s: want a duration of %s or more (none: until revoked)", nt.ttl, store.MinTokenTTL)
	}
	if err := store.ValidateTokenName(nt.name); err != nil {
		return usagef(fs, "tokens create: --name: %s", paramsText(err))
	}
	if nt.subject != "" {
		if err := store.ValidateSubject(nt.subject); err != nil {
			return usagef(fs, "tokens create: --subject: %s", paramsText(err))
		}
	}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ta, err := openTokenAdmin(ctx, t)
	if err != nil {
		return err
	}
	nt.grants = grants
	secret, err := ta.create(ctx, nt)
	if err != nil {
		return errors.Join(err, ta.close())
	}
	// Printed before the close, whose error must not lose a secret shown once.
	fmt.Fprintf(stderr, "created token %q; its secret (shown only this once) is:\n", nt.name)
	fmt.Fprintln(stdout, secret)
	return ta.close()
}

func tokensRotate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens rotate", "tokens rotate NAME [--grace DURATION] (--store URL | --server URL --token T)",
		"Give a token a new secret and print it on stdout, once. The old secret keeps working for\n"+
			"--grace, so that its users can move to the new one; --grace 0 ends it at once.", stderr)
	var t target
	tokenFlags(fs, &t)
	grace := fs.Duration("grace", store.DefaultTokenGrace, "how long the old secret keeps working (`duration`; 0: it stops at once)")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "tokens rotate: want one token name, got %d arguments", len(pos))
	case *grace < 0:
		return usagef(fs, "tokens rotate: --grace %s: want 0 or more", *grace)
	}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ta, err := openTokenAdmin(ctx, t)
	if err != nil {
		return err
	}
	secret, tok, err := ta.rotate(ctx, pos[0], *grace)
	if err != nil {
		return errors.Join(err, ta.close())
	}
	old := "the old secret stopped working"
	if tok.PreviousExpiresAt != nil && tok.RotatedAt != nil && tok.PreviousExpiresAt.After(*tok.RotatedAt) {
		old = "the old secret works until " + tok.PreviousExpiresAt.Local().Format(time.DateTime)
	}
	// Printed before the close, whose error must not lose a secret shown once.
	fmt.Fprintf(stderr, "rotated token %q (%s); its new secret (shown only this once) is:\n", tok.Name, old)
	fmt.Fprintln(stdout, secret)
	return ta.close()
}

func tokensList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens list", "tokens list (--store URL | --server URL --token T) [--json]",
		"List every token by name, live and revoked, with its grants (never its secret).", stderr)
	var (
		t      target
		asJSON bool
	)
	tokenFlags(fs, &t)
	fs.BoolVar(&asJSON, "json", false, "print the tokens as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "tokens list: unexpected argument %q", pos[0])
	}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ta, err := openTokenAdmin(ctx, t)
	if err != nil {
		return err
	}
	ts, err := ta.list(ctx)
	if err = errors.Join(err, ta.close()); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, struct {
			Tokens []*store.Token `json:"tokens"`
		}{ts})
	}
	return printTokenTable(stdout, ts)
}

func printTokenTable(w io.Writer, ts []*store.Token) error {
	if len(ts) == 0 {
		fmt.Fprintln(w, "no tokens")
		return nil
	}
	now := time.Now()
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tGRANTS\tCREATED\tEXPIRES\tLAST USED\tREVOKED\tSUBJECT")
	for _, t := range ts {
		expires := timeOrDash(t.ExpiresAt)
		if t.ExpiresAt != nil && !now.Before(*t.ExpiresAt) {
			expires += " (expired)"
		}
		subject := t.Subject
		if subject == "" {
			subject = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, auth.GrantsText(t.Grants),
			t.CreatedAt.Local().Format(time.DateTime), expires, timeOrDash(t.LastUsedAt), timeOrDash(t.RevokedAt), subject)
	}
	return tw.Flush()
}

// timeOrDash is a table's cell of an optional time: "-" when unset.
func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func tokensRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens revoke", "tokens revoke NAME (--store URL | --server URL --token T)",
		"Revoke a token: the server revoking it refuses it at once, others within a second (their caches expire).\nIts name stays taken.", stderr)
	var t target
	tokenFlags(fs, &t)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "tokens revoke: want one token name, got %d arguments", len(pos))
	}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ta, err := openTokenAdmin(ctx, t)
	if err != nil {
		return err
	}
	tok, err := ta.revoke(ctx, pos[0])
	if err = errors.Join(err, ta.close()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked token %q at %s\n", tok.Name, tok.RevokedAt.Local().Format(time.DateTime))
	return nil
}

var _ flag.Value = (*grantsFlag)(nil)
