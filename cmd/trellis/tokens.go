package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

const tokensUsage = `Usage: trellis tokens <subcommand> [arguments] --store URL

Subcommands:
  create    create a token and print its secret, once (--name NAME --grant ROLE:NAMESPACE[:QUEUE] ...)
  list      list the tokens: names, grants, when created and revoked
  revoke    revoke a token by name, at once and for ever

Tokens are the bearer secrets clients and workers present to "trellis server". The
store keeps only a hash of each secret: a lost secret cannot be shown again (revoke
the token and create another). Roles are admin, producer, worker, reader and
approver; a grant's namespace "*" means every namespace. These commands work on
the store directly; through a server, by an admin token, is to come.
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
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
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

// openTokenStore opens the existing store at url (tokens commands create none).
func openTokenStore(ctx context.Context, url string) (store.Store, error) {
	if err := checkStoreExists(url); err != nil {
		return nil, err
	}
	return trellis.OpenExistingStore(ctx, url, time.Now)
}

func tokensCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens create", "tokens create --name NAME --grant ROLE:NAMESPACE[:QUEUE] ... --store URL",
		"Create a token and print its secret on stdout, once: it cannot be shown again.", stderr)
	var (
		url, name string
		grants    grantsFlag
	)
	storeFlag(fs, &url)
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
	if err := requireStore(fs, &url); err != nil {
		return err
	}
	secret, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	st, err := openTokenStore(ctx, url)
	if err != nil {
		return err
	}
	_, err = st.TokenCreate(ctx, &store.TokenCreateParams{Name: name, Grants: grants, Hash: hash})
	if err = errors.Join(err, st.Close()); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "created token %q; its secret (shown only this once) is:\n", name)
	fmt.Fprintln(stdout, secret)
	return nil
}

func tokensList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tokens list", "tokens list --store URL [--json]",
		"List every token by name, live and revoked, with its grants (never its secret).", stderr)
	var (
		url    string
		asJSON bool
	)
	storeFlag(fs, &url)
	fs.BoolVar(&asJSON, "json", false, "print the tokens as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "tokens list: unexpected argument %q", pos[0])
	}
	if err := requireStore(fs, &url); err != nil {
		return err
	}
	st, err := openTokenStore(ctx, url)
	if err != nil {
		return err
	}
	ts, err := st.TokenList(ctx)
	if err = errors.Join(err, st.Close()); err != nil {
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
	fs := newFlagSet("tokens revoke", "tokens revoke NAME --store URL",
		"Revoke a token: servers refuse it within seconds (their caches expire). Its name stays taken.", stderr)
	var url string
	storeFlag(fs, &url)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) != 1:
		return usagef(fs, "tokens revoke: want one token name, got %d arguments", len(pos))
	}
	if err := requireStore(fs, &url); err != nil {
		return err
	}
	st, err := openTokenStore(ctx, url)
	if err != nil {
		return err
	}
	t, err := st.TokenRevoke(ctx, &store.TokenRevokeParams{Name: pos[0]})
	if err = errors.Join(err, st.Close()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "revoked token %q at %s\n", t.Name, t.RevokedAt.Local().Format(time.DateTime))
	return nil
}

var _ flag.Value = (*grantsFlag)(nil)
