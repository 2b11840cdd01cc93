package forward

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The wire encoding of parameters and results: JSON, by reflection, so that a
// value arrives exactly as it was sent (reflect.DeepEqual), which
// encoding/json does not promise for the store's records:
//
//   - every exported field of a struct is sent under its Go name; `json` tags
//     and MarshalJSON methods are ignored (they shape the HTTP API's records,
//     and `json:"-"` hides fields a forwarded write needs); zero fields are left
//     out and come back zero;
//   - nil and empty slices and maps stay apart (null, [] or {}); []byte (and
//     json.RawMessage) is base64, so any bytes travel, valid JSON or not; a
//     string that is not UTF-8 travels as {"bytes": base64} (a map key must be
//     UTF-8);
//   - integers are decimal text, parsed back at their own width (no float64
//     on the way); floats are the shortest text that parses back to them (NaN
//     and infinities are refused);
//   - time.Time is RFC 3339 with nanoseconds: the instant and the offset
//     travel, the monotonic reading and the zone's name do not (a UTC time comes
//     back as time.UTC; another zone as a fixed zone of the same offset);
//   - a value of interface type error travels as its code and message
//     (errors.Is keeps matching the store sentinel, see Error); another
//     interface, a non-nil func or chan, an unexported field, or a complex
//     number is refused with an error naming where it is: such a value cannot
//     be rebuilt on the other side, and dropping it silently would change the
//     write (a store.IdempotencyRecord's Response func is such a value).

var (
	timeType  = reflect.TypeFor[time.Time]()
	errorType = reflect.TypeFor[error]()
)

// Marshal encodes v in the wire encoding.
func Marshal(v any) ([]byte, error) {
	return appendValue(make([]byte, 0, 512), reflect.ValueOf(v), typeName(v))
}

// Unmarshal decodes data, in the wire encoding, into the value v points to.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("forward: decoding into %T: not a non-nil pointer", v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("forward: decoding %s: %w", rv.Type().Elem(), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("forward: decoding %s: data after the value", rv.Type().Elem())
	}
	return decodeValue(tree, rv.Elem(), rv.Type().Elem().String())
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

// appendValue appends rv's encoding to buf.
func appendValue(buf []byte, rv reflect.Value, path string) ([]byte, error) {
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
		return appendList(buf, rv, path)
	case reflect.Array:
		return appendList(buf, rv, path)
	case reflect.Map:
		return appendMap(buf, rv, path)
	case reflect.Pointer:
		if rv.IsNil() {
			return append(buf, "null"...), nil
		}
		return appendValue(buf, rv.Elem(), path)
	case reflect.Interface:
		return appendInterface(buf, rv, path)
	case reflect.Struct:
		return appendStruct(buf, rv, path)
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

func appendList(buf []byte, rv reflect.Value, path string) ([]byte, error) {
	buf = append(buf, '[')
	for i := range rv.Len() {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendValue(buf, rv.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return nil, err
		}
	}
	return append(buf, ']'), nil
}

func appendMap(buf []byte, rv reflect.Value, path string) ([]byte, error) {
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
	for i, e := range entries {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(appendString(buf, e.key), ':')
		var err error
		if buf, err = appendValue(buf, e.val, path+"["+strconv.Quote(e.key)+"]"); err != nil {
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

func appendInterface(buf []byte, rv reflect.Value, path string) ([]byte, error) {
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

func appendStruct(buf []byte, rv reflect.Value, path string) ([]byte, error) {
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
			return nil, fmt.Errorf("forward: encoding %s.%s: a %s cannot be sent to another server (leave it nil)", path, f.Name, f.Type)
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(appendString(buf, f.Name), ':')
		var err error
		if buf, err = appendValue(buf, fv, path+"."+f.Name); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// decodeValue sets rv (settable) from a tree json.Decoder made with UseNumber.
func decodeValue(tree any, rv reflect.Value, path string) error {
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
		return decodeString(tree, rv, path)
	case reflect.Slice:
		return decodeSlice(tree, rv, path)
	case reflect.Array:
		return decodeArray(tree, rv, path)
	case reflect.Map:
		return decodeMap(tree, rv, path)
	case reflect.Pointer:
		p := reflect.New(rv.Type().Elem())
		if err := decodeValue(tree, p.Elem(), path); err != nil {
			return err
		}
		rv.Set(p)
		return nil
	case reflect.Interface:
		return decodeInterface(tree, rv, path)
	case reflect.Struct:
		return decodeStruct(tree, rv, path)
	}
	return fmt.Errorf("forward: decoding %s: a %s cannot be received", path, rv.Type())
}

func mismatch(path string, tree any, t reflect.Type) error {
	return fmt.Errorf("forward: decoding %s: a JSON %T does not fit a %s", path, tree, t)
}

// decodeString takes a JSON string, or {"bytes": base64} for one that is not
// UTF-8.
func decodeString(tree any, rv reflect.Value, path string) error {
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

func decodeSlice(tree any, rv reflect.Value, path string) error {
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
		if err := decodeValue(item, s.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	rv.Set(s)
	return nil
}

func decodeArray(tree any, rv reflect.Value, path string) error {
	list, ok := tree.([]any)
	if !ok || len(list) != rv.Len() {
		return fmt.Errorf("forward: decoding %s: want a JSON array of %d items", path, rv.Len())
	}
	for i, item := range list {
		if err := decodeValue(item, rv.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	return nil
}

func decodeMap(tree any, rv reflect.Value, path string) error {
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
		if err := decodeValue(obj[k], v, path+"["+strconv.Quote(k)+"]"); err != nil {
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

func decodeInterface(tree any, rv reflect.Value, path string) error {
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

func decodeStruct(tree any, rv reflect.Value, path string) error {
	obj, ok := tree.(map[string]any)
	if !ok {
		return mismatch(path, tree, rv.Type())
	}
	rv.SetZero()
	t := rv.Type()
	for _, name := range sortedKeys(obj) {
		v := obj[name]
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 || !f.IsExported() {
			// A field this build does not have: the other server runs another
			// version, and dropping the field could change the write.
			return fmt.Errorf("forward: decoding %s: %s has no field %q", path, t, name)
		}
		if err := decodeValue(v, rv.Field(f.Index[0]), path+"."+name); err != nil {
			return err
		}
	}
	return nil
}

// sortedKeys returns obj's keys in order: an error names the first bad one,
// the same one every time.
func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
