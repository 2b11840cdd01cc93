package storejs

// methods_gen.go: the store's reads, writes and the leader's dispatch of
// forwarded writes, from the store interfaces (see internal/gen).
//go:generate go run ./internal/gen
