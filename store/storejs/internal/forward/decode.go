package forward

import (
	"github.com/trellis-dev/trellis/store"

	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// decoder reads one value of the wire encoding.
type decoder struct {
	refs map[int64]reflect.Value // the shared pointers met, by id
}

// decodePointer sets rv to a new value, or to the shared pointer a
// {"@ref": n} names ({"@id": n, "@v": value} made it). Only pointers to
// structs are shared (a struct has no field named "@...").
func (d *decoder) decodePointer(tree any, rv reflect.Value, path string) error {
	obj, isObj := tree.(map[string]any)
	if isObj && rv.Type().Elem().Kind() == reflect.Struct {
		if ref, ok := obj["@ref"]; ok {
			id, err := refID(ref, len(obj) == 1)
			p, known := d.refs[id]
			if err != nil || !known || p.Type() != rv.Type() {
				return fmt.Errorf("forward: decoding %s: a reference to no earlier %s", path, rv.Type())
			}
			rv.Set(p)
			return nil
		}
		if ref, ok := obj["@id"]; ok {
			id, err := refID(ref, len(obj) == 2)
			if _, dup := d.refs[id]; err != nil || dup {
				return fmt.Errorf("forward: decoding %s: a malformed shared %s", path, rv.Type())
			}
			p := reflect.New(rv.Type().Elem())
			if d.refs == nil {
				d.refs = map[int64]reflect.Value{}
			}
			d.refs[id] = p
			if err := d.decodeValue(obj["@v"], p.Elem(), path); err != nil {
				return err
			}
			rv.Set(p)
			return nil
		}
	}
	p := reflect.New(rv.Type().Elem())
	if err := d.decodeValue(tree, p.Elem(), path); err != nil {
		return err
	}
	rv.Set(p)
	return nil
}

// refID is the id of a shared pointer (ok: the object has no other keys).
func refID(v any, ok bool) (int64, error) {
	n, isNum := v.(json.Number)
	if !ok || !isNum {
		return 0, fmt.Errorf("not an id")
	}
	return strconv.ParseInt(string(n), 10, 64)
}

// decodeValue sets rv (settable) from a tree json.Decoder made with UseNumber.
func (d *decoder) decodeValue(tree any, rv reflect.Value, path string) error {
	if tree == nil {
		rv.SetZero()
		return nil
	}
	if rv.Type() == timeType {
		s, ok := tree.(string)
		if !ok {
			return mismatch(path, tree, rv.Type())
		}
		var t time.Time
		if err := t.UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("forward: decoding %s: %w", path, err)
		}
		rv.Set(reflect.ValueOf(t))
		return nil
	}
	switch rv.Kind() {
	case reflect.Bool:
		b, ok := tree.(bool)
		if !ok {
			return mismatch(path, tree, rv.Type())
		}
		rv.SetBool(b)
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return decodeNumber(tree, rv, path)
	case reflect.String:
		return d.decodeString(tree, rv, path)
	case reflect.Slice:
		return d.decodeSlice(tree, rv, path)
	case reflect.Array:
		return d.decodeArray(tree, rv, path)
	case reflect.Map:
		return d.decodeMap(tree, rv, path)
	case reflect.Pointer:
		return d.decodePointer(tree, rv, path)
	case reflect.Interface:
		return d.decodeInterface(tree, rv, path)
	case reflect.Struct:
		return d.decodeStruct(tree, rv, path)
	}
	return fmt.Errorf("forward: decoding %s: a %s cannot be received", path, rv.Type())
}

func mismatch(path string, tree any, t reflect.Type) error {
	return fmt.Errorf("forward: decoding %s: a JSON %T does not fit a %s", path, tree, t)
}

// decodeString takes a JSON string, or {"bytes": base64} for one that is not
// UTF-8.
func (d *decoder) decodeString(tree any, rv reflect.Value, path string) error {
	switch v := tree.(type) {
	case string:
		rv.SetString(v)
		return nil
	case map[string]any:
		b64, ok := v["bytes"].(string)
		if !ok || len(v) != 1 {
			return mismatch(path, tree, rv.Type())
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("forward: decoding %s: %w", path, err)
		}
		rv.SetString(string(b))
		return nil
	}
	return mismatch(path, tree, rv.Type())
}

func decodeNumber(tree any, rv reflect.Value, path string) error {
	n, ok := tree.(json.Number)
	if !ok {
		return mismatch(path, tree, rv.Type())
	}
	bits := rv.Type().Bits()
	var err error
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		if i, err = strconv.ParseInt(string(n), 10, bits); err == nil {
			rv.SetInt(i)
		}
	case reflect.Float32, reflect.Float64:
		var f float64
		if f, err = strconv.ParseFloat(string(n), bits); err == nil {
			rv.SetFloat(f)
		}
	default:
		var u uint64
		if u, err = strconv.ParseUint(string(n), 10, bits); err == nil {
			rv.SetUint(u)
		}
	}
	if err != nil {
		return fmt.Errorf("forward: decoding %s: %w", path, err)
	}
	return nil
}

func (d *decoder) decodeSlice(tree any, rv reflect.Value, path string) error {
	if rv.Type().Elem().Kind() == reflect.Uint8 {
		s, ok := tree.(string)
		if !ok {
			return mismatch(path, tree, rv.Type())
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("forward: decoding %s: %w", path, err)
		}
		rv.Set(reflect.ValueOf(b).Convert(rv.Type()))
		return nil
	}
	list, ok := tree.([]any)
	if !ok {
		return mismatch(path, tree, rv.Type())
	}
	s := reflect.MakeSlice(rv.Type(), len(list), len(list))
	for i, item := range list {
		if err := d.decodeValue(item, s.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	rv.Set(s)
	return nil
}

func (d *decoder) decodeArray(tree any, rv reflect.Value, path string) error {
	list, ok := tree.([]any)
	if !ok || len(list) != rv.Len() {
		return fmt.Errorf("forward: decoding %s: want a JSON array of %d items", path, rv.Len())
	}
	for i, item := range list {
		if err := d.decodeValue(item, rv.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) decodeMap(tree any, rv reflect.Value, path string) error {
	obj, ok := tree.(map[string]any)
	if !ok {
		return mismatch(path, tree, rv.Type())
	}
	t := rv.Type()
	m := reflect.MakeMapWithSize(t, len(obj))
	for _, k := range sortedKeys(obj) {
		kv := reflect.New(t.Key()).Elem()
		if err := decodeMapKey(k, kv, path); err != nil {
			return err
		}
		v := reflect.New(t.Elem()).Elem()
		if err := d.decodeValue(obj[k], v, path+"["+strconv.Quote(k)+"]"); err != nil {
			return err
		}
		m.SetMapIndex(kv, v)
	}
	rv.Set(m)
	return nil
}

func decodeMapKey(k string, kv reflect.Value, path string) error {
	if kv.Kind() == reflect.String {
		kv.SetString(k)
		return nil
	}
	switch kv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return decodeNumber(json.Number(k), kv, path+" key")
	}
	return fmt.Errorf("forward: decoding %s: a map key of type %s cannot be received", path, kv.Type())
}

func (d *decoder) decodeInterface(tree any, rv reflect.Value, path string) error {
	if rv.Type() != errorType {
		return fmt.Errorf("forward: decoding %s: a value of interface type %s cannot be received", path, rv.Type())
	}
	obj, ok := tree.(map[string]any)
	code, okc := obj["code"].(string)
	msg, okm := obj["message"].(string)
	if !ok || !okc || !okm || len(obj) != 2 {
		return fmt.Errorf("forward: decoding %s: want an error's {code, message}", path)
	}
	rv.Set(reflect.ValueOf(fromWire(&wireError{Code: code, Message: msg})))
	return nil
}

func (d *decoder) decodeStruct(tree any, rv reflect.Value, path string) error {
	obj, ok := tree.(map[string]any)
	if !ok {
		return mismatch(path, tree, rv.Type())
	}
	rv.SetZero()
	t := rv.Type()
	for _, name := range sortedKeys(obj) {
		if f, ok := t.FieldByName(name); !ok || len(f.Index) != 1 || !f.IsExported() {
			// A field this build does not have: the other server runs another
			// version, and dropping the field could change the write.
			return fmt.Errorf("forward: decoding %s: %s has no field %q", path, t, name)
		}
	}
	for i := range t.NumField() { // in the encoder's order: a shared pointer's first use first
		name := t.Field(i).Name
		if v, ok := obj[name]; ok {
			if err := d.decodeValue(v, rv.Field(i), path+"."+name); err != nil {
				return err
			}
		}
	}
	if t == idemRecordType {
		if err := rv.Addr().Interface().(*store.IdempotencyRecord).RebuildResponse(); err != nil {
			return fmt.Errorf("forward: decoding %s: %w", path, err)
		}
	}
	return nil
}
