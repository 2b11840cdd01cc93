package storeremote

import "github.com/trellis-dev/trellis/internal/workertransport"

// init registers this package as the transport of trellis.NewWorker with
// Config.Server. A program that runs a remote worker imports it:
//
//	import _ "github.com/trellis-dev/trellis/store/storeremote"
//
// so that one that does not link no Connect client.
func init() {
	workertransport.Register(func(cfg workertransport.Config) (workertransport.Store, error) {
		s, err := New(Config{URL: cfg.URL, Token: cfg.Token, Namespace: cfg.Namespace, TLSConfig: cfg.TLSConfig})
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	})
}
