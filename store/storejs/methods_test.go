package storejs_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs"
	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// The interfaces the JetStream store implements (checked at compile time).
var (
	_ store.Store            = (*storejs.Store)(nil)
	_ store.WorkerStore      = (*storejs.Store)(nil)
	_ store.RunStore         = (*storejs.Store)(nil)
	_ store.EventStore       = (*storejs.Store)(nil)
	_ store.ApprovalStore    = (*storejs.Store)(nil)
	_ store.AdminStore       = (*storejs.Store)(nil)
	_ store.ScheduleStore    = (*storejs.Store)(nil)
	_ store.Subscriber       = (*storejs.Store)(nil)
	_ store.BatchCreator     = (*storejs.Store)(nil)
	_ store.RunDeleter       = (*storejs.Store)(nil)
	_ store.WorkerRegistry   = (*storejs.Store)(nil)
	_ store.TokenStore       = (*storejs.Store)(nil)
	_ store.KeyStore         = (*storejs.Store)(nil)
	_ store.AuditStore       = (*storejs.Store)(nil)
	_ store.IdempotencyStore = (*storejs.Store)(nil)
	_ store.SessionStore     = (*storejs.Store)(nil)
	_ store.QueueStore       = (*storejs.Store)(nil)
	_ store.RunCounter       = (*storejs.Store)(nil)
	_ store.CommitObserver   = (*storejs.Store)(nil)
	_ store.QueueCounter     = (*storejs.Store)(nil)
	_ store.WorkerCounter    = (*storejs.Store)(nil)
	_ store.RunWatcher       = (*storejs.Store)(nil)
)

// openReplica opens a SQLite store on a fresh file, closed when the test ends.
func openReplica(t *testing.T) *storesqlite.Store {
	t.Helper()
	rep, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "replica.db")})
	if err != nil {
		t.Fatalf("opening the replica: %v", err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	return rep
}

// TestStoreInterfaces: a Store over a real replica is each interface the
// driver offers, as a value of type any (what callers' type assertions see),
// and none of those it must not offer; its calls reach the replica.
func TestStoreInterfaces(t *testing.T) {
	t.Parallel()
	s := any(storejs.NewOverReplica(openReplica(t)))
	for _, it := range []reflect.Type{
		reflect.TypeFor[store.Store](), reflect.TypeFor[store.RunCounter](), reflect.TypeFor[store.CommitObserver](),
		reflect.TypeFor[store.QueueCounter](), reflect.TypeFor[store.WorkerCounter](), reflect.TypeFor[store.RunWatcher](),
	} {
		if !reflect.TypeOf(s).Implements(it) {
			t.Errorf("not a %v", it)
		}
	}
	if _, ok := s.(store.TxStarter); ok {
		t.Error("a TxStarter: a caller's transaction on the replica would bypass the log")
	}
	if _, ok := s.(store.TxCheckpointer); ok {
		t.Error("a TxCheckpointer: a caller's transaction on the replica would bypass the log")
	}
	if _, ok := s.(store.ForeignCommits); ok {
		t.Error("a ForeignCommits")
	}
	ctx := context.Background()
	st := s.(store.Store)
	res, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "w1", Workflow: "wf", Queue: "default"})
	if err != nil || !res.Created {
		t.Fatalf("RunCreate: %+v, %v", res, err)
	}
	if r, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "w1"}); err != nil || r.ID != "r1" {
		t.Fatalf("RunGet: %+v, %v", r, err)
	}
	if _, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "nope"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("RunGet unknown: %v", err)
	}
}

// TestWriteTypesRoundTrip fills the parameters and the result of every
// forwarded write with non-zero values, by reflection, and checks that the
// wire encoding brings them back exactly: fields hidden from JSON
// (`json:"-"`) included, and errors as their sentinel and message. Funcs are
// left nil: they cannot travel (TestForwardRefusesFuncs).
func TestWriteTypesRoundTrip(t *testing.T) {
	t.Parallel()
	st := reflect.TypeFor[*storejs.Store]()
	names := storejs.ForwardedMethods()
	slices.Sort(names)
	if len(names) < 30 {
		t.Fatalf("only %d forwarded methods", len(names))
	}
	for _, name := range names {
		m, ok := st.MethodByName(name)
		if !ok {
			t.Fatalf("no method %s", name)
		}
		var types []reflect.Type
		for i := 2; i < m.Type.NumIn(); i++ { // after the receiver and ctx
			types = append(types, m.Type.In(i))
		}
		for i := 0; i < m.Type.NumOut()-1; i++ {
			types = append(types, m.Type.Out(i))
		}
		for _, typ := range types {
			in := reflect.New(typ)
			f := &filler{}
			f.fill(in.Elem(), 0)
			data, err := forward.Marshal(in.Elem().Interface())
			if err != nil {
				t.Errorf("%s %v: %v", name, typ, err)
				continue
			}
			out := reflect.New(typ)
			if err := forward.Unmarshal(data, out.Interface()); err != nil {
				t.Errorf("%s %v: %v\n%s", name, typ, err, data)
				continue
			}
			restoreErrors(out.Elem())
			if !reflect.DeepEqual(in.Elem().Interface(), out.Elem().Interface()) {
				t.Errorf("%s %v does not round-trip:\n got %#v\nwant %#v", name, typ, out.Elem().Interface(), in.Elem().Interface())
			}
			if f.unfilled != nil {
				t.Errorf("%s %v: left zero: %v", name, typ, f.unfilled)
			}
		}
	}
}

// sentinel is the error the filler puts in error fields.
var sentinel = store.ErrRunExists

// filler fills a value with distinct non-zero values.
type filler struct {
	n        int
	unfilled []string
}

func (f *filler) fill(v reflect.Value, depth int) {
	f.n++
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2031, 1, 2, 3, 4, 5, f.n, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(-f.n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(f.n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(f.n) + 0.25)
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", f.n%3) + string(rune('a'+f.n%26)))
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{0, byte(f.n), 255, '{'}) // not JSON: bytes travel as bytes
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		f.fill(k, depth+1)
		f.fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		if depth > 6 {
			return
		}
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			fld := v.Type().Field(i)
			if v.Type() == reflect.TypeFor[store.IdempotencyRecord]() && fld.Name == "Renderer" {
				continue // it comes back as a rebuilt Response: TestFollowerForwardsIdempotencyKeys
			}
			if fld.IsExported() && fld.Type.Kind() != reflect.Func {
				f.fill(v.Field(i), depth+1)
			}
		}
	case reflect.Interface:
		if v.Type() == reflect.TypeFor[error]() {
			v.Set(reflect.ValueOf(sentinel))
			return
		}
		f.unfilled = append(f.unfilled, v.Type().String())
	default:
		f.unfilled = append(f.unfilled, v.Type().String())
	}
}

// restoreErrors replaces every error that arrived as the sentinel (errors.Is,
// and its message) by the sentinel itself, so that DeepEqual compares the
// rest.
func restoreErrors(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			restoreErrors(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			restoreErrors(v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(iter.Value())
			restoreErrors(e)
			v.SetMapIndex(iter.Key(), e)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				restoreErrors(v.Field(i))
			}
		}
	case reflect.Interface:
		if err, ok := v.Interface().(error); ok && errors.Is(err, sentinel) && err.Error() == sentinel.Error() {
			v.Set(reflect.ValueOf(sentinel))
		}
	}
}
