package storeauth

// CacheSizes returns the number of found and unknown credentials cached.
func (a *Authenticator) CacheSizes() (found, unknown int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.found), len(a.unknown)
}

// SetMaxCached bounds each cache to n entries instead of maxCached.
func (a *Authenticator) SetMaxCached(n int) { a.max = n }
