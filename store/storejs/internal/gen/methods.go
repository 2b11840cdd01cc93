package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"

	"github.com/trellis-dev/trellis/store/storesqlite"
)

// kind is how a method is generated.
type kind int

const (
	read kind = iota
	write
)

// method is one generated method.
type method struct {
	name    string
	kind    kind
	params  []reflect.Type // after ctx
	results []reflect.Type // before error: none or one
}

var (
	ctxType     = reflect.TypeFor[context.Context]()
	errType     = reflect.TypeFor[error]()
	replicaType = reflect.TypeFor[*storesqlite.Store]()
)

// methodSet collects and checks the methods of the implemented interfaces
// that are generated, by name.
func methodSet() ([]method, error) {
	if err := checkInterfaces(); err != nil {
		return nil, err
	}
	sigs := map[string]reflect.Type{}
	for _, it := range implemented {
		for i := range it.NumMethod() {
			m := it.Method(i)
			if prev, ok := sigs[m.Name]; ok && prev != m.Type {
				return nil, fmt.Errorf("%s is %v in one interface and %v in another", m.Name, prev, m.Type)
			}
			sigs[m.Name] = m.Type
		}
	}
	if err := checkExcluded(sigs); err != nil {
		return nil, err
	}
	kinds, err := classify(sigs)
	if err != nil {
		return nil, err
	}
	var ms []method
	var errs []error
	for name, sig := range sigs {
		if _, ok := handWritten[name]; ok {
			continue
		}
		m, err := newMethod(name, kinds[name], sig)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].name < ms[j].name })
	return ms, errors.Join(errs...)
}

// checkInterfaces: the replica implements every interface the store does (it
// serves them) and every excluded one (else the exclusion is stale).
func checkInterfaces() error {
	var errs []error
	for _, it := range implemented {
		if !replicaType.Implements(it) {
			errs = append(errs, fmt.Errorf("%v does not implement %v, which the JetStream store delegates to it", replicaType, it))
		}
	}
	for it := range excluded {
		if !replicaType.Implements(it) {
			errs = append(errs, fmt.Errorf("%v does not implement the excluded %v: drop it from excluded", replicaType, it))
		}
	}
	return errors.Join(errs...)
}

// checkExcluded: the store must not implement an excluded interface by
// accident (its methods all in an implemented one).
func checkExcluded(sigs map[string]reflect.Type) error {
	var errs []error
	for it := range excluded {
		all := true
		for i := range it.NumMethod() {
			if _, ok := sigs[it.Method(i).Name]; !ok {
				all = false
			}
		}
		if all {
			errs = append(errs, fmt.Errorf("the store would implement the excluded %v", it))
		}
	}
	return errors.Join(errs...)
}

// classify returns the kind of every method to generate and fails on a method
// of no list, of two lists, or a listed name that is no method.
func classify(sigs map[string]reflect.Type) (map[string]kind, error) {
	kinds := map[string]kind{}
	var errs []error
	seen := map[string]int{}
	for _, l := range []struct {
		names []string
		kind  kind
	}{{reads, read}, {writes, write}} {
		for _, n := range l.names {
			kinds[n] = l.kind
			seen[n]++
		}
	}
	for n := range handWritten {
		seen[n]++
	}
	for n, count := range seen {
		if _, ok := sigs[n]; !ok {
			errs = append(errs, fmt.Errorf("%s is listed but is a method of no implemented interface", n))
		}
		if count > 1 {
			errs = append(errs, fmt.Errorf("%s is in more than one of reads, writes and handWritten", n))
		}
	}
	for n := range sigs {
		if seen[n] == 0 {
			errs = append(errs, fmt.Errorf("%s is new: add it to reads or writes (or handWritten) in lists.go", n))
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return kinds, errors.Join(errs...)
}

// newMethod checks the shape of a generated method: ctx first, an error last,
// at most one other result, no func or channel anywhere at the top.
func newMethod(name string, k kind, sig reflect.Type) (method, error) {
	m := method{name: name, kind: k}
	for i := range sig.NumIn() {
		if t := sig.In(i); t.Kind() == reflect.Func || t.Kind() == reflect.Chan {
			return m, fmt.Errorf("%s takes a %v: write it by hand (add it to handWritten)", name, t)
		}
	}
	for i := range sig.NumOut() {
		if t := sig.Out(i); t.Kind() == reflect.Func || t.Kind() == reflect.Chan {
			return m, fmt.Errorf("%s returns a %v: write it by hand (add it to handWritten)", name, t)
		}
	}
	if sig.NumIn() == 0 || sig.In(0) != ctxType {
		return m, fmt.Errorf("%s has no context.Context first: write it by hand (add it to handWritten)", name)
	}
	if sig.IsVariadic() {
		return m, fmt.Errorf("%s is variadic: write it by hand (add it to handWritten)", name)
	}
	n := sig.NumOut()
	if n == 0 || sig.Out(n-1) != errType || n > 2 {
		return m, fmt.Errorf("%s must return (error) or (T, error): write it by hand (add it to handWritten)", name)
	}
	for i := 1; i < sig.NumIn(); i++ {
		m.params = append(m.params, sig.In(i))
	}
	for i := 0; i < n-1; i++ {
		m.results = append(m.results, sig.Out(i))
	}
	return m, nil
}
