// Package wire is the byte format of journal records besides events (whose
// one encoder is runevent.Event.AppendJSON): the canonical JSON of a result
// record and its decoding, the canonical inputs object, and the time stamps
// of a run's meta. Every journal backend and the archive store exactly
// these bytes, so that a run read from Valkey and the same run read from
// the archive are byte-for-byte equal.
//
// wire imports bundle, canonjson and runevent, and nothing else of
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
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/canonjson"
	"github.com/pyrula/caseworker/runevent"
)

// ErrInvalid is wrapped by every error about a value that cannot be encoded
// or decoded: a result with both or neither of result and error, a result
// value or inputs that are not valid JSON, a malformed stored record or
// time stamp.
var ErrInvalid = errors.New("invalid journal input")

// FormatTime returns t in runevent.TimeLayout (converted to UTC, truncated
// to the microsecond), the layout of a run's created_at and finished_at as
// of its events' at.
func FormatTime(t time.Time) string { return runevent.FormatTime(t) }

// ParseTime parses an RFC 3339 time (any precision) and returns it in UTC.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q: %w", ErrInvalid, s, err)
	}
	return t.UTC(), nil
}

// Truncate returns t as it reads back after a round trip through
// runevent.TimeLayout.
func Truncate(t time.Time) time.Time { return runevent.Truncate(t) }

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
