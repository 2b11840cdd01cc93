package storeauth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// BootstrapName is the name of the token Bootstrap creates.
const BootstrapName = "admin"

// bootstrapGrants are the bootstrap token's: admin of every namespace.
var bootstrapGrants = []auth.Grant{{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}}

// Bootstrap prepares the tokens of a store's first use: when the store has no
// token at all (live or revoked), it creates one named "admin" with the admin role
// on every namespace and returns its secret, which the caller shows once and
// never again. Otherwise, or when another process created it first, it returns "".
// `trellis server` uses BootstrapFile instead, which never prints the secret.
func Bootstrap(ctx context.Context, ts store.TokenStore) (string, error) {
	if has, err := hasTokens(ctx, ts); err != nil || has {
		return "", err
	}
	secret, hash, err := auth.NewToken()
	if err != nil {
		return "", fmt.Errorf("bootstrapping tokens: %w", err)
	}
	_, err = ts.TokenCreate(ctx, &store.TokenCreateParams{Name: BootstrapName, Hash: hash, Grants: bootstrapGrants})
	switch {
	case errors.Is(err, store.ErrTokenExists):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("bootstrapping tokens: %w", err)
	}
	return secret, nil
}

// hasTokens reports whether the store holds any token, live or revoked.
func hasTokens(ctx context.Context, ts store.TokenStore) (bool, error) {
	existing, err := ts.TokenList(ctx)
	if err != nil {
		return false, fmt.Errorf("bootstrapping tokens: %w", err)
	}
	return len(existing) > 0, nil
}

// ErrTokenFileExists: BootstrapFile found the store without tokens and its file
// already there, which it never overwrites.
var ErrTokenFileExists = errors.New("admin token file exists")

// BootstrapFile is Bootstrap that writes the secret to a new file at path
// instead of returning it, and reports whether it created the token. The file is
// created exclusively (O_EXCL) with mode 0600 and holds the secret and a
// newline. Its order makes sure no admin token exists whose secret nobody has:
//
//  1. a store with any token (live or revoked) makes nothing: the file is not
//     looked at;
//  2. the file is created, written and synced before the token is created, so
//     a crash after it leaves at worst a file whose secret matches no token;
//  3. a file already there is never overwritten nor trusted (it may hold
//     another store's secret, or have been written by someone else): unless
//     the store has a token by now (another server bootstrapped it), this
//     fails with ErrTokenFileExists and the operator moves the file away;
//  4. when the token cannot be created (another server created one first, or
//     the store failed), the file is removed again, unless the token is there
//     after all (an error that does not say nothing was written: a commit
//     whose answer was lost, a cancelled start): the file then stays, and
//     BootstrapFile reports the token created.
func BootstrapFile(ctx context.Context, ts store.TokenStore, path string) (created bool, err error) {
	if has, err := hasTokens(ctx, ts); err != nil || has {
		return false, err
	}
	secret, hash, err := auth.NewToken()
	if err != nil {
		return false, fmt.Errorf("bootstrapping tokens: %w", err)
	}
	if err := writeNewFile(path, secret+"\n"); errors.Is(err, fs.ErrExist) {
		if has, herr := hasTokens(ctx, ts); herr != nil || has {
			return false, herr
		}
		return false, fmt.Errorf("bootstrapping tokens: %w: the store has no token yet, and %s exists; it is never overwritten. "+
			"If another server of the store is creating the first token with this file now, start again in a moment (the "+
			"file is then its secret); else it may hold another store's secret, or one of a start that stopped before "+
			"creating its token: move it away, or choose another file, and start again", ErrTokenFileExists, path)
	} else if err != nil {
		return false, fmt.Errorf("bootstrapping tokens: %w", err)
	}
	_, err = ts.TokenCreate(ctx, &store.TokenCreateParams{Name: BootstrapName, Hash: hash, Grants: bootstrapGrants})
	if err != nil && !errors.Is(err, store.ErrTokenExists) {
		// Did it commit after all? Asked on a context of its own: ctx may be
		// the one whose cancellation failed the create.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, ferr := ts.TokenByHash(cctx, &store.TokenByHashParams{Hash: hash})
		cancel()
		switch {
		case ferr == nil:
			return true, nil // its secret is in the file
		case !errors.Is(ferr, store.ErrTokenNotFound):
			// Cannot tell: the file stays, with its secret, and the next
			// start finds either the token (and uses nothing) or the file
			// (and says so).
			return false, fmt.Errorf("bootstrapping tokens: %w (whether the admin token was created is unknown: "+
				"%s holds its secret if it was)", err, path)
		}
	}
	if err != nil {
		// The secret in the file matches no token: it goes.
		rerr := os.Remove(path)
		if errors.Is(err, store.ErrTokenExists) && rerr == nil {
			return false, nil // another server created it first
		}
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s, whose secret matches no token: %w", path, rerr))
		}
		return false, fmt.Errorf("bootstrapping tokens: %w", err)
	}
	return true, nil
}

// writeNewFile creates path exclusively with mode 0600, writes text and syncs
// the file and its directory; on a failure after creating it, it removes it.
func writeNewFile(path, text string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	// 0600 whatever the umask (which may have made it narrower, 0400).
	if err = f.Chmod(0o600); err == nil {
		_, err = f.WriteString(text)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync() // the file's name is durable before the token is
		d.Close()
	}
	return nil
}
