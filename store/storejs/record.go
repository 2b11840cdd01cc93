package storejs

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"database/sql/driver"

	"github.com/trellis-dev/trellis/store/storesqlite"
)

// A log record is one committed write batch of the writer (kind batch) or the
// start of a writer's term (kind epoch). Its bytes:
//
//	"TRLG"  magic
//	u8      format version (recordFormat)
//	u8      kind
//	uvarint schema version (the replica's newest migration)
//	uvarint epoch (the writer's term)
//	[32]    SHA-256 of the previous record's bytes (zeros: the first)
//	uvarint topics, then each: uvarint length, bytes
//	uvarint distinct statement texts, then each: uvarint length, bytes
//	uvarint statements, then each: uvarint text index, uvarint arguments,
//	        then each argument: a tag byte and its value
//
// A record's hash is the SHA-256 of all its bytes; the next record carries
// it, so that a replica detects a lost, altered, reordered or truncated
// record: it refuses to apply one that does not follow the last it applied.
// Records larger than fragmentSize are split across consecutive messages.
const (
	recordMagic  = "TRLG"
	recordFormat = 1

	kindBatch = 1
	kindEpoch = 2
)

// argument tags
const (
	argNull = iota
	argInt
	argFloat
	argFalse
	argTrue
	argString
	argBytes
	argTime
)

type record struct {
	kind   byte
	schema uint64
	epoch  uint64
	prev   [32]byte
	batch  storesqlite.LogBatch
}

// errCorrupt marks a record that cannot be decoded.
var errCorrupt = errors.New("corrupt log record")

func encodeRecord(r *record) ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, recordMagic...)
	b = append(b, recordFormat, r.kind)
	b = binary.AppendUvarint(b, r.schema)
	b = binary.AppendUvarint(b, r.epoch)
	b = append(b, r.prev[:]...)
	b = binary.AppendUvarint(b, uint64(len(r.batch.Topics)))
	for _, t := range r.batch.Topics {
		b = appendString(b, t)
	}
	index := map[string]uint64{}
	var texts []string
	for _, st := range r.batch.Statements {
		if _, ok := index[st.Query]; !ok {
			index[st.Query] = uint64(len(texts))
			texts = append(texts, st.Query)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(texts)))
	for _, t := range texts {
		b = appendString(b, t)
	}
	b = binary.AppendUvarint(b, uint64(len(r.batch.Statements)))
	for _, st := range r.batch.Statements {
		b = binary.AppendUvarint(b, index[st.Query])
		b = binary.AppendUvarint(b, uint64(len(st.Args)))
		for i, a := range st.Args {
			var err error
			if b, err = appendArg(b, a); err != nil {
				return nil, fmt.Errorf("argument %d of %q: %w", i+1, st.Query, err)
			}
		}
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendArg(b []byte, a driver.Value) ([]byte, error) {
	switch v := a.(type) {
	case nil:
		return append(b, argNull), nil
	case int64:
		return binary.AppendVarint(append(b, argInt), v), nil
	case float64:
		return binary.LittleEndian.AppendUint64(append(b, argFloat), math.Float64bits(v)), nil
	case bool:
		if v {
			return append(b, argTrue), nil
		}
		return append(b, argFalse), nil
	case string:
		return appendString(append(b, argString), v), nil
	case []byte:
		if v == nil {
			return append(b, argNull), nil
		}
		b = binary.AppendUvarint(append(b, argBytes), uint64(len(v)))
		return append(b, v...), nil
	case time.Time:
		return appendString(append(b, argTime), v.Format(time.RFC3339Nano)), nil
	default:
		return nil, fmt.Errorf("a %T cannot be logged", a)
	}
}

// hashOf is a record's hash.
func hashOf(data []byte) [32]byte { return sha256.Sum256(data) }

// decoder reads a record's bytes.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errCorrupt, what)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes(n uint64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string(what string) string { return string(d.bytes(d.uvarint(what), what)) }

// count reads a count of items of at least min bytes each, refusing one the
// rest of the record cannot hold (so that a corrupt count allocates nothing).
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err == nil && n > uint64(len(d.b)/min) {
		d.fail(what)
		return 0
	}
	return int(n)
}

func decodeRecord(data []byte) (*record, error) {
	d := &decoder{b: data}
	if string(d.bytes(4, "magic")) != recordMagic {
		return nil, fmt.Errorf("%w: not a Trellis log record", errCorrupt)
	}
	head := d.bytes(2, "header")
	if d.err != nil {
		return nil, d.err
	}
	if head[0] != recordFormat {
		return nil, fmt.Errorf("log record format %d: this build reads format %d (upgrade trellis)", head[0], recordFormat)
	}
	r := &record{kind: head[1]}
	if r.kind != kindBatch && r.kind != kindEpoch {
		return nil, fmt.Errorf("%w: kind %d", errCorrupt, r.kind)
	}
	r.schema = d.uvarint("schema")
	r.epoch = d.uvarint("epoch")
	copy(r.prev[:], d.bytes(32, "previous hash"))
	r.batch.Topics = make([]string, d.count("topics", 1))
	for i := range r.batch.Topics {
		r.batch.Topics[i] = d.string("topic")
	}
	texts := make([]string, d.count("statement texts", 1))
	for i := range texts {
		texts[i] = d.string("statement text")
	}
	r.batch.Statements = make([]storesqlite.Statement, d.count("statements", 2))
	for i := range r.batch.Statements {
		st := &r.batch.Statements[i]
		idx := d.uvarint("statement")
		if d.err == nil && idx >= uint64(len(texts)) {
			d.fail("statement text index")
		}
		if d.err != nil {
			return nil, d.err
		}
		st.Query = texts[idx]
		st.Args = make([]driver.Value, d.count("arguments", 1))
		for j := range st.Args {
			st.Args[j] = d.arg()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

func (d *decoder) arg() driver.Value {
	tag := d.bytes(1, "argument")
	if d.err != nil {
		return nil
	}
	switch tag[0] {
	case argNull:
		return nil
	case argInt:
		v, n := binary.Varint(d.b)
		if n <= 0 {
			d.fail("integer")
			return nil
		}
		d.b = d.b[n:]
		return v
	case argFloat:
		return math.Float64frombits(binary.LittleEndian.Uint64(append(d.bytes(8, "float"), make([]byte, 8)...)))
	case argFalse:
		return false
	case argTrue:
		return true
	case argString:
		return d.string("string")
	case argBytes:
		return append([]byte{}, d.bytes(d.uvarint("bytes"), "bytes")...)
	case argTime:
		t, err := time.Parse(time.RFC3339Nano, d.string("time"))
		if err != nil {
			d.fail("time")
		}
		return t
	default:
		d.fail(fmt.Sprintf("argument tag %d", tag[0]))
		return nil
	}
}

// replicaState is what a replica keeps of the log beside the sequence it
// reached (storesqlite.LogPosition.State): the epoch and hash of the last
// record it applied.
type replicaState struct {
	epoch uint64
	hash  [32]byte
}

func (s replicaState) encode() []byte {
	b := binary.AppendUvarint(nil, s.epoch)
	return append(b, s.hash[:]...)
}

func decodeState(b []byte) (replicaState, error) {
	if len(b) == 0 {
		return replicaState{}, nil
	}
	d := &decoder{b: b}
	var s replicaState
	s.epoch = d.uvarint("epoch")
	copy(s.hash[:], d.bytes(32, "hash"))
	if d.err != nil {
		return replicaState{}, fmt.Errorf("the replica's log position: %w", d.err)
	}
	return s, nil
}
