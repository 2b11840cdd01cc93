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
  create    create a token and print its secret, once (--name NAME --grant ROLE:NAMESPACE[:QUEUE] ...)
  list      list the tokens: names, grants, when created and revoked
  revoke    revoke a token by name, at once and for ever

Tokens are the bearer secrets clients and workers present to "trellis server". The
store keeps only a hash of each secret: a lost secret cannot be shown again (revoke
the token and create another). Roles are admin, producer, worker, reader and
approver; a grant's namespace "*" means every namespace. These commands work on
the store directly (--store), or through a server (--server, also $TRELLIS_SERVER)
with an admin token of every namespace (--token, also $TRELLIS_TOKEN), such as the
one "trellis server" prints on its first start.
`

func runTokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	printUsage := func(w io.Writer) { fmt.Fprint(w, tokensUsage) }
	if len(args) == 0 {
		return &usageError{msg: "tokens: no subcommand given", usage: printUsage}
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create":
		return tokensCreate(ctx, rest, stdout, stderr)
	case "list":
		return tokensList(ctx, rest, stdout, stderr)
	case "revoke":
		return tokensRevoke(ctx, rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return &helpError{usage: printUsage}
	default:
		return &usageError{msg: fmt.Sprintf("tokens: unknown subcommand %q", sub), usage: printUsage}
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
	create(ctx context.Context, name string, grants []auth.Grant) (string, error)
	list(ctx context.Context) ([]*store.Token, error)
	revoke(ctx context.Context, name string) (*store.Token, error)
	close() error
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

func (s *storeTokens) create(ctx context.Context, name string, grants []auth.Grant) (string, error) {
	secret, hash, err := auth.NewToken()
	if err != nil {
		return "", err
	}
	_, err = s.st.TokenCreate(ctx, &store.TokenCreateParams{Name: name, Grants: grants, Hash: hash})
	return secret, err
}

func (s *storeTokens) list(ctx context.Context) ([]*store.Token, error) { return s.st.TokenList(ctx) }

func (s *storeTokens) revoke(ctx context.Context, name string) (*store.Token, error) {
	return s.st.TokenRevoke(ctx, &store.TokenRevokeParams{Name: name})
}

func (s *storeTokens) close() error { return s.st.Close() }

// serverTokens manages tokens through a server's /v1/tokens routes
// (docs/http-api.md#tokens); the server draws the secret and keeps its hash.
type serverTokens struct{ hc *httpc.Client }

func (s *serverTokens) create(ctx context.Context, name string, grants []auth.Grant) (string, error) {
	var out server.CreatedToken
	body := server.TokenRequest{Name: name, Grants: grants}
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

func (s *serverTokens) close() error {
	s.hc.Close()
	return nil
}

func tokensCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens create", "tokens create --name NAME --grant ROLE:NAMESPACE[:QUEUE] ... (--store URL | --server URL --token T)",
		"Create a token and print its secret on stdout, once: it cannot be shown again.", stderr)
	var (
		t      target
		name   string
		grants grantsFlag
	)
	tokenFlags(fs, &t)
	fs.StringVar(&name, "name", "", "the token's `name`, unique in the store (required)")
	fs.Var(&grants, "grant", "give the token a role on a namespace (* for all), optionally one queue only:\n`ROLE:NAMESPACE[:QUEUE]`, repeatable, at least one; roles: admin, producer,\nworker, reader, approver")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "tokens create: unexpected argument %q", pos[0])
	case len(grants) == 0:
		return usagef(fs, "tokens create: at least one --grant is required")
	}
	if err := store.ValidateTokenName(name); err != nil {
		return usagef(fs, "tokens create: --name: %s", paramsText(err))
	}
	if err := t.resolve(fs); err != nil {
		return err
	}
	ta, err := openTokenAdmin(ctx, t)
	if err != nil {
		return err
	}
	secret, err := ta.create(ctx, name, grants)
	if err = errors.Join(err, ta.close()); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "created token %q; its secret (shown only this once) is:\n", name)
	fmt.Fprintln(stdout, secret)
	return nil
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
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tGRANTS\tCREATED\tREVOKED")
	for _, t := range ts {
		revoked := "-"
		if t.RevokedAt != nil {
			revoked = t.RevokedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, grantsText(t.Grants),
			t.CreatedAt.Local().Format(time.DateTime), revoked)
	}
	return tw.Flush()
}

// grantsText writes grants as --grant takes them, comma-separated.
func grantsText(gs []auth.Grant) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = string(g.Role) + ":" + g.Namespace
		if g.Queue != "" {
			parts[i] += ":" + g.Queue
		}
	}
	return strings.Join(parts, ",")
}

func tokensRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens revoke", "tokens revoke NAME (--store URL | --server URL --token T)",
		"Revoke a token: servers refuse it within seconds (their caches expire). Its name stays taken.", stderr)
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
