package sqlstore

import (
	"errors"

	"github.com/trellis-dev/trellis/store"
)

// keyQueries are the statements of the key store (store.KeyStore).
type keyQueries struct {
	insert, get string
}

func newKeyQueries(r func(string) string) keyQueries {
	return keyQueries{
		// insert keeps the first key of a name: a second server's key is dropped.
		insert: r(`INSERT INTO secret_keys (name, key, created_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`),
		get:    r(`SELECT key FROM secret_keys WHERE name = $1`),
	}
}

// SecretKey keeps p.New as the key p.Name unless the store has one, and returns
// the one kept; p must be valid (SecretKeyParams.Validate).
func (s *SQL) SecretKey(tx Tx, p *store.SecretKeyParams) ([]byte, error) {
	if _, err := tx.Exec(s.key.insert, p.Name, p.New, s.d.Time(tx.Now())); err != nil {
		return nil, err
	}
	var key []byte
	if err := tx.QueryRow(s.key.get, p.Name).Scan(&key); err != nil {
		if errors.Is(err, ErrNoRows) {
			return nil, errors.New("the key just written is missing")
		}
		return nil, err
	}
	return key, nil
}
