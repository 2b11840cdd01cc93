package storejs

import (
	"context"
	"errors"
)

// placeholder until the forwarding layer lands.
type noForwarder struct{}

func newForwarder(*Store) forwarder { return noForwarder{} }

func (noForwarder) Call(context.Context, string, any, any) error {
	return errors.New("storejs: no leader")
}

func (s *Store) serve() func() { return func() {} }
