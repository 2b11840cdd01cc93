package main

import (
	"bytes"
	"context"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestGeneratedFileIsCurrent: methods_gen.go is what the generator writes
// now (run go generate ./store/storejs after changing a store interface or
// the lists).
func TestGeneratedFileIsCurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "methods_gen.go")
	if err := run(path); err != nil {
		t.Fatalf("generating: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "methods_gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, committed) {
		t.Fatal("store/storejs/methods_gen.go is stale: run go generate ./store/storejs")
	}
}

// TestListsCoverStoreInterfaces type-checks package store and the SQLite
// driver: every interface of package store that *storesqlite.Store
// implements is in implemented or excluded, so that a new optional interface
// is a decision, not an omission.
func TestListsCoverStoreInterfaces(t *testing.T) {
	t.Parallel()
	const storePath = "github.com/trellis-dev/trellis/store"
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes}
	pkgs, err := packages.Load(cfg, storePath, storePath+"/storesqlite")
	if err != nil || packages.PrintErrors(pkgs) > 0 || len(pkgs) != 2 {
		t.Fatalf("loading the store packages: %v", err)
	}
	var storePkg, sqlitePkg *types.Package
	for _, p := range pkgs {
		if p.PkgPath == storePath {
			storePkg = p.Types
		} else {
			sqlitePkg = p.Types
		}
	}
	replica := types.NewPointer(sqlitePkg.Scope().Lookup("Store").Type())
	listed := map[string]bool{}
	for _, it := range implemented {
		listed[it.Name()] = true
	}
	for it := range excluded {
		listed[it.Name()] = true
	}
	var found int
	for _, name := range storePkg.Scope().Names() {
		obj, ok := storePkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || !obj.Exported() {
			continue
		}
		iface, ok := obj.Type().Underlying().(*types.Interface)
		if !ok || !types.Implements(replica, iface) {
			continue
		}
		found++
		if !listed[name] {
			t.Errorf("*storesqlite.Store implements store.%s: add it to implemented or excluded in lists.go", name)
		}
	}
	if found < len(listed) {
		t.Errorf("found %d interfaces the replica implements, fewer than the %d listed", found, len(listed))
	}
}

// TestGenerationFails: an unclassified method, a method that takes a func or
// returns a channel, or a listed name that is no method stop the generator
// with an error that says what to do.
func TestGenerationFails(t *testing.T) {
	t.Parallel()
	ctx, errT := reflect.TypeFor[context.Context](), reflect.TypeFor[error]()
	fn := func(in []reflect.Type, out ...reflect.Type) reflect.Type { return reflect.FuncOf(in, out, false) }
	for name, c := range map[string]struct {
		sig  reflect.Type
		want string
	}{
		"takes a func": {fn([]reflect.Type{ctx, reflect.TypeFor[func()]()}, errT), "takes a func()"},
		"returns a chan": {fn([]reflect.Type{ctx}, reflect.TypeFor[<-chan int](), errT),
			"returns a <-chan int"},
		"no context":    {fn([]reflect.Type{reflect.TypeFor[string]()}, errT), "no context.Context first"},
		"no error":      {fn([]reflect.Type{ctx}, reflect.TypeFor[int]()), "must return"},
		"three results": {fn([]reflect.Type{ctx}, reflect.TypeFor[int](), reflect.TypeFor[int](), errT), "must return"},
	} {
		if _, err := newMethod("M", write, c.sig); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", name, err, c.want)
		}
	}

	sigs := map[string]reflect.Type{}
	for _, it := range implemented {
		for i := range it.NumMethod() {
			sigs[it.Method(i).Name] = it.Method(i).Type
		}
	}
	if _, err := classify(sigs); err != nil {
		t.Fatalf("the real method set: %v", err)
	}
	sigs["RunShiny"] = fn([]reflect.Type{ctx}, errT)
	if _, err := classify(sigs); err == nil || !strings.Contains(err.Error(), "RunShiny is new") {
		t.Errorf("an unlisted method: err = %v", err)
	}
	delete(sigs, "RunShiny")
	delete(sigs, "RunGet")
	if _, err := classify(sigs); err == nil || !strings.Contains(err.Error(), "RunGet is listed but") {
		t.Errorf("a stale list entry: err = %v", err)
	}
}
