// Package wire is the byte format of journal records: the canonical JSON of
// an event (run_seq, kind and at merged with the event's fields) and of a
// result record, the format of the at time stamp, and their decoding. Every
// journal backend and the archive store exactly these bytes, so that a run
// read from Valkey and the same run read from the archive are byte-for-byte
// equal, and so that a bundle's history is already canonical.
//
// wire imports bundle, bundle/canonjson and runevent, and nothing else of
// the project (in particular not journal, which imports it).
package wire

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/canonjson"
	"github.com/pyrula/caseworker/runevent"
)

// ErrInvalid is wrapped by every error about a value that cannot be encoded
// or decoded: invalid JSON in a field, a reserved or non-UTF-8 field name, a
// result with both or neither of result and error, a malformed stored record.
var ErrInvalid = errors.New("invalid journal input")

// TimeLayout is the layout of an event's at: runevent.TimeLayout, RFC 3339
// in UTC with exactly six fractional digits (microseconds).
const TimeLayout = runevent.TimeLayout

// The member names an event's fields may not use: the journal sets them.
const (
	NameRunSeq = "run_seq"
	NameKind   = "kind"
	NameAt     = "at"
)

// FormatTime returns t in TimeLayout (converted to UTC, truncated to the
// microsecond).
func FormatTime(t time.Time) string { return runevent.FormatTime(t) }

// AppendTime appends t in TimeLayout to dst.
func AppendTime(dst []byte, t time.Time) []byte { return runevent.AppendTime(dst, t) }

// ParseTime parses an RFC 3339 time (any precision) and returns it in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q: %w", ErrInvalid, s, err)
	}
	return t.UTC(), nil
}

// Truncate returns t as it reads back after a round trip through TimeLayout.
func Truncate(t time.Time) time.Time { return runevent.Truncate(t) }

// AppendEvent appends the canonical JSON object of an event to dst: the
// members run_seq, kind and at merged with fields, names in code-point order,
// every field value canonicalised (which also validates it).
func AppendEvent(dst []byte, seq int64, kind runevent.Kind, at time.Time, fields map[string]json.RawMessage) ([]byte, error) {
	out, _, err := appendEvent(dst, seq, false, kind, at, fields)
	return out, err
}

// SplitEvent returns the canonical JSON of an event whose run_seq is not yet
// known, cut where the run_seq digits go: the event with run_seq n is
// head + strconv.Itoa(n) + tail. Valkey's append script joins the pieces
// once it has assigned the number.
func SplitEvent(kind runevent.Kind, at time.Time, fields map[string]json.RawMessage) (head, tail []byte, err error) {
	out, off, err := appendEvent(nil, 0, true, kind, at, fields)
	if err != nil {
		return nil, nil, err
	}
	return out[:off:off], out[off:], nil
}

// JoinEvent is the event of SplitEvent's pieces with run_seq seq.
func JoinEvent(head []byte, seq int64, tail []byte) []byte {
	out := make([]byte, 0, len(head)+20+len(tail))
	out = append(out, head...)
	out = strconv.AppendInt(out, seq, 10)
	return append(out, tail...)
}

// CheckFieldName refuses a field name an event may not carry.
func CheckFieldName(name string) error {
	switch {
	case name == NameRunSeq || name == NameKind || name == NameAt:
		return fmt.Errorf("%w: field %q is set by the journal", ErrInvalid, name)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: field name %q is not valid UTF-8", ErrInvalid, name)
	}
	return nil
}

// appendEvent writes the event; when placeholder is set it leaves run_seq's
// digits out and returns their offset.
func appendEvent(dst []byte, seq int64, placeholder bool, kind runevent.Kind, at time.Time, fields map[string]json.RawMessage) ([]byte, int, error) {
	if kind == "" {
		return dst, 0, fmt.Errorf("%w: event without a kind", ErrInvalid)
	}
	if !utf8.ValidString(string(kind)) {
		return dst, 0, fmt.Errorf("%w: event kind %q is not valid UTF-8", ErrInvalid, kind)
	}
	names := make([]string, 0, len(fields)+3)
	names = append(names, NameAt, NameKind, NameRunSeq)
	for name := range fields {
		if err := CheckFieldName(name); err != nil {
			return dst, 0, err
		}
		names = append(names, name)
	}
	slices.Sort(names) // byte order of UTF-8 is code-point order
	n, off := len(dst), 0
	dst = append(dst, '{')
	for i, name := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = canonjson.AppendQuoted(dst, []byte(name))
		dst = append(dst, ':')
		switch name {
		case NameAt:
			dst = append(dst, '"')
			dst = AppendTime(dst, at)
			dst = append(dst, '"')
		case NameKind:
			dst = canonjson.AppendQuoted(dst, []byte(kind))
		case NameRunSeq:
			off = len(dst) - n
			if !placeholder {
				dst = strconv.AppendInt(dst, seq, 10)
			}
		default:
			var err error
			m := len(dst)
			if dst, err = canonjson.Append(dst, fields[name]); err != nil {
				return dst[:m], 0, fmt.Errorf("%w: field %q of a %s event: %w", ErrInvalid, name, kind, err)
			}
		}
	}
	return append(dst, '}'), off, nil
}

// decoders reuse jsontext decoders across decodes.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// members calls fn with each member of the JSON object raw: its name and its
// value, a sub-slice of raw (the value is checked to be one valid JSON
// value). Names must not repeat.
func members(raw []byte, what string, fn func(name string, value []byte) error) error {
	d := decoders.Get().(*jsontext.Decoder)
	defer func() {
		d.Reset(bytes.NewReader(nil)) // drop raw
		decoders.Put(d)
	}()
	d.Reset(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
	bad := func(err error) error { return fmt.Errorf("%w: %s: %w", ErrInvalid, what, err) }
	tok, err := d.ReadToken()
	if err != nil {
		return bad(err)
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("%w: %s is not an object", ErrInvalid, what)
	}
	seen := make(map[string]bool, 8)
	for d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return bad(err)
		}
		name := tok.String()
		if seen[name] {
			return fmt.Errorf("%w: %s has member %q twice", ErrInvalid, what, name)
		}
		seen[name] = true
		v, err := d.ReadValue()
		if err != nil {
			return bad(err)
		}
		end := int(d.InputOffset())
		if err := fn(name, raw[end-len(v):end:end]); err != nil {
			return err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return bad(err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return fmt.Errorf("%w: %s has data after the object", ErrInvalid, what)
	}
	return nil
}

// str reads a JSON string value.
func str(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), true
	}
	u, err := jsontext.AppendUnquote(nil, v)
	return string(u), err == nil
}

// DecodeEvent reads an event written by AppendEvent (or joined from
// SplitEvent's pieces). The field values are sub-slices of raw: the caller
// gives up raw.
func DecodeEvent(raw []byte) (seq int64, kind runevent.Kind, at time.Time, fields map[string]json.RawMessage, err error) {
	var hasSeq, hasKind, hasAt bool
	fields = make(map[string]json.RawMessage, 4)
	err = members(raw, "event", func(name string, v []byte) error {
		switch name {
		case NameRunSeq:
			seq, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil || seq < 1 {
				return fmt.Errorf("%w: event has run_seq %.30s", ErrInvalid, v)
			}
			hasSeq = true
		case NameKind:
			s, ok := str(v)
			if !ok || s == "" {
				return fmt.Errorf("%w: event has kind %.60s", ErrInvalid, v)
			}
			kind = runevent.Kind(s)
			hasKind = true
		case NameAt:
			s, ok := str(v)
			if !ok {
				return fmt.Errorf("%w: event has at %.60s", ErrInvalid, v)
			}
			if at, err = ParseTime(s); err != nil {
				return err
			}
			hasAt = true
		default:
			fields[name] = v
		}
		return nil
	})
	switch {
	case err != nil:
	case !hasSeq:
		err = fmt.Errorf("%w: event has no run_seq", ErrInvalid)
	case !hasKind:
		err = fmt.Errorf("%w: event %d has no kind", ErrInvalid, seq)
	case !hasAt:
		err = fmt.Errorf("%w: event %d has no at", ErrInvalid, seq)
	}
	if err != nil {
		return 0, "", time.Time{}, nil, err
	}
	return seq, kind, at, fields, nil
}

// ResultID is the identity of a call result, "kind:key": the field of the
// results hash and of a supplied answer.
func ResultID(kind, key string) string { return kind + ":" + key }

// AppendResult appends the canonical JSON record of r to dst:
// {"error"|"result", "fingerprint", "key", "kind"}, the value canonicalised.
func AppendResult(dst []byte, r bundle.Result) ([]byte, error) {
	switch {
	case r.Kind == "" || r.Key == "":
		return dst, fmt.Errorf("%w: result %q without a kind or key", ErrInvalid, ResultID(r.Kind, r.Key))
	case !utf8.ValidString(r.Kind) || !utf8.ValidString(r.Key) || !utf8.ValidString(r.Fingerprint):
		return dst, fmt.Errorf("%w: result %q is not valid UTF-8", ErrInvalid, ResultID(r.Kind, r.Key))
	case (r.Result == nil) == (r.Error == nil):
		return dst, fmt.Errorf("%w: result %s must have exactly one of result and error", ErrInvalid, ResultID(r.Kind, r.Key))
	}
	name, value := "result", r.Result
	if r.Error != nil {
		name, value = "error", r.Error
	}
	n := len(dst)
	str := func(name, v string) {
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = canonjson.AppendQuoted(dst, []byte(v))
	}
	dst = append(dst, '{')
	if name == "error" {
		dst = append(dst, `"error":`...)
		var err error
		if dst, err = canonjson.Append(dst, value); err != nil {
			return dst[:n], fmt.Errorf("%w: error of result %s: %w", ErrInvalid, ResultID(r.Kind, r.Key), err)
		}
		str("fingerprint", r.Fingerprint)
		str("key", r.Key)
		str("kind", r.Kind)
	} else {
		dst = append(dst, `"fingerprint":`...)
		dst = canonjson.AppendQuoted(dst, []byte(r.Fingerprint))
		str("key", r.Key)
		str("kind", r.Kind)
		dst = append(dst, `,"result":`...)
		var err error
		if dst, err = canonjson.Append(dst, value); err != nil {
			return dst[:n], fmt.Errorf("%w: result %s: %w", ErrInvalid, ResultID(r.Kind, r.Key), err)
		}
	}
	return append(dst, '}'), nil
}

// DecodeResult reads a record written by AppendResult. Result or Error is a
// sub-slice of raw: the caller gives up raw.
func DecodeResult(raw []byte) (bundle.Result, error) {
	var r bundle.Result
	err := members(raw, "result record", func(name string, v []byte) error {
		var ok bool
		switch name {
		case "result":
			r.Result = v
			ok = true
		case "error":
			r.Error = v
			ok = true
		case "kind":
			r.Kind, ok = str(v)
		case "key":
			r.Key, ok = str(v)
		case "fingerprint":
			r.Fingerprint, ok = str(v)
		default:
			return fmt.Errorf("%w: result record has member %q", ErrInvalid, name)
		}
		if !ok {
			return fmt.Errorf("%w: result record member %s is %.60s", ErrInvalid, name, v)
		}
		return nil
	})
	if err != nil {
		return bundle.Result{}, err
	}
	if r.Kind == "" || r.Key == "" || (r.Result == nil) == (r.Error == nil) {
		return bundle.Result{}, fmt.Errorf("%w: result record %.80q", ErrInvalid, raw)
	}
	return r, nil
}

// SortResults sorts results by (kind, key) in code-point order, the order of
// a bundle's results.
func SortResults(rs []bundle.Result) {
	slices.SortFunc(rs, func(a, b bundle.Result) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Key, b.Key))
	})
}

// CanonicalObject returns the canonical form of raw, which must be a JSON
// object; nil or empty raw is the empty object.
func CanonicalObject(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("{}"), nil
	}
	out, err := canonjson.Canonicalize(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if out[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	return out, nil
}
