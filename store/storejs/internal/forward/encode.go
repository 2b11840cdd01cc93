package forward

import (
	"encoding/base64"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// encoder writes one value in the wire encoding.
type encoder struct {
	shared map[ptrKey]int // pointers to structs met more than once, and their ids (0: none yet)
	nextID int
}

// ptrKey is a pointer and its type (a struct and its first field share an
// address).
type ptrKey struct {
	t    reflect.Type
	addr uintptr
}

// sharedPointers returns the pointers to structs that rv holds more than
// once (a result's Claimed.Run that is its Run): the encoding keeps them one.
func sharedPointers(rv reflect.Value) map[ptrKey]int {
	seen := map[ptrKey]int{}
	var walk func(v reflect.Value, depth int)
	walk = func(v reflect.Value, depth int) {
		if !v.IsValid() || depth > 100 {
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() {
				return
			}
			if v.Elem().Kind() == reflect.Struct {
				k := ptrKey{v.Type(), v.Pointer()}
				if seen[k]++; seen[k] > 1 {
					return // its target was walked
				}
			}
			walk(v.Elem(), depth+1)
		case reflect.Interface:
			if !v.IsNil() && v.Type() != errorType {
				walk(v.Elem(), depth+1)
			}
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				return
			}
			for i := range v.Len() {
				walk(v.Index(i), depth+1)
			}
		case reflect.Map:
			iter := v.MapRange()
			for iter.Next() {
				walk(iter.Value(), depth+1)
			}
		case reflect.Struct:
			if v.Type() == timeType {
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i), depth+1)
				}
			}
		}
	}
	walk(rv, 0)
	shared := map[ptrKey]int{}
	for k, n := range seen {
		if n > 1 {
			shared[k] = 0
		}
	}
	return shared
}

// appendPointer appends the value rv points to; a pointer held more than
// once as {"@id": n, "@v": value} the first time and {"@ref": n} after.
func (e *encoder) appendPointer(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	k := ptrKey{rv.Type(), rv.Pointer()}
	id, shared := e.shared[k]
	switch {
	case !shared:
		return e.appendValue(buf, rv.Elem(), path)
	case id > 0:
		return append(strconv.AppendInt(append(buf, `{"@ref":`...), int64(id), 10), '}'), nil
	}
	e.nextID++
	e.shared[k] = e.nextID
	buf = strconv.AppendInt(append(buf, `{"@id":`...), int64(e.nextID), 10)
	buf, err := e.appendValue(append(buf, `,"@v":`...), rv.Elem(), path)
	if err != nil {
		return nil, err
	}
	return append(buf, '}'), nil
}

// appendValue appends rv's encoding to buf.
func (e *encoder) appendValue(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	if !rv.IsValid() {
		return append(buf, "null"...), nil
	}
	if rv.Type() == timeType {
		b, err := rv.Interface().(time.Time).MarshalText()
		if err != nil {
			return nil, fmt.Errorf("forward: encoding %s: %w", path, err)
		}
		return append(append(append(buf, '"'), b...), '"'), nil
	}
	switch rv.Kind() {
	case reflect.Bool:
		return strconv.AppendBool(buf, rv.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(buf, rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.AppendUint(buf, rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("forward: encoding %s: %v has no JSON form", path, f)
		}
		return strconv.AppendFloat(buf, f, 'g', -1, rv.Type().Bits()), nil
	case reflect.String:
		return appendString(buf, rv.String()), nil
	case reflect.Slice:
		if rv.IsNil() {
			return append(buf, "null"...), nil
		}
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return appendBase64(buf, rv.Bytes()), nil
		}
		return e.appendList(buf, rv, path)
	case reflect.Array:
		return e.appendList(buf, rv, path)
	case reflect.Map:
		return e.appendMap(buf, rv, path)
	case reflect.Pointer:
		if rv.IsNil() {
			return append(buf, "null"...), nil
		}
		return e.appendPointer(buf, rv, path)
	case reflect.Interface:
		return e.appendInterface(buf, rv, path)
	case reflect.Struct:
		return e.appendStruct(buf, rv, path)
	}
	return nil, fmt.Errorf("forward: encoding %s: a %s cannot be sent", path, rv.Type())
}

func appendBase64(buf, b []byte) []byte {
	buf = append(buf, '"')
	buf = base64.StdEncoding.AppendEncode(buf, b)
	return append(buf, '"')
}

// appendString appends s as a JSON string; a string that is not UTF-8 (which
// a JSON string cannot carry exactly) as {"bytes": base64}.
func appendString(buf []byte, s string) []byte {
	if !utf8.ValidString(s) {
		buf = append(buf, `{"bytes":`...)
		return append(appendBase64(buf, []byte(s)), '}')
	}
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			buf = append(buf, c)
		}
	}
	return append(buf, '"')
}

func (e *encoder) appendList(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	buf = append(buf, '[')
	for i := range rv.Len() {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = e.appendValue(buf, rv.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return nil, err
		}
	}
	return append(buf, ']'), nil
}

func (e *encoder) appendMap(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	if rv.IsNil() {
		return append(buf, "null"...), nil
	}
	type entry struct {
		key string
		val reflect.Value
	}
	entries := make([]entry, 0, rv.Len())
	iter := rv.MapRange()
	for iter.Next() {
		k, err := mapKey(iter.Key(), path)
		if err != nil {
			return nil, err
		}
		if !utf8.ValidString(k) {
			return nil, fmt.Errorf("forward: encoding %s: a map key that is not UTF-8 cannot be sent", path)
		}
		entries = append(entries, entry{k, iter.Value()})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].key < entries[j].key }) // the same bytes every time
	buf = append(buf, '{')
	for i, en := range entries {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(appendString(buf, en.key), ':')
		var err error
		if buf, err = e.appendValue(buf, en.val, path+"["+strconv.Quote(en.key)+"]"); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// mapKey is the text of a map key: a string or an integer.
func mapKey(k reflect.Value, path string) (string, error) {
	switch k.Kind() {
	case reflect.String:
		return k.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", fmt.Errorf("forward: encoding %s: a map key of type %s cannot be sent", path, k.Type())
}

func (e *encoder) appendInterface(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	if rv.IsNil() {
		return append(buf, "null"...), nil
	}
	if rv.Type() == errorType {
		w := toWire(rv.Interface().(error))
		buf = append(buf, `{"code":`...)
		buf = appendString(buf, w.Code)
		buf = append(buf, `,"message":`...)
		return append(appendString(buf, strings.ToValidUTF8(w.Message, "\uFFFD")), '}'), nil
	}
	return nil, fmt.Errorf("forward: encoding %s: a value of interface type %s cannot be sent", path, rv.Type())
}

func (e *encoder) appendStruct(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	t := rv.Type()
	buf = append(buf, '{')
	first := true
	for i := range t.NumField() {
		f, fv := t.Field(i), rv.Field(i)
		if !f.IsExported() {
			return nil, fmt.Errorf("forward: encoding %s.%s: an unexported field cannot be sent", path, f.Name)
		}
		if fv.IsZero() {
			continue
		}
		if k := f.Type.Kind(); k == reflect.Func || k == reflect.Chan {
			if t == idemRecordType && f.Name == "Response" && rv.FieldByName("Renderer").String() != "" {
				continue // rebuilt on the other side from Renderer and Status
			}
			return nil, fmt.Errorf("forward: encoding %s.%s: a %s cannot be sent to another server (leave it nil)", path, f.Name, f.Type)
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(appendString(buf, f.Name), ':')
		var err error
		if buf, err = e.appendValue(buf, fv, path+"."+f.Name); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}
