package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/pyrula/caseworker/canonjson"
)

// errUnexpected makes Decode fall back to encoding/json, whose answer for an
// unexpected shape (an unknown or differently cased key) is the reference.
var errUnexpected = errors.New("bundle: unexpected shape")

// decodeCanonical decodes canonical bundle bytes into b. It gives what
// json.Unmarshal gives (the differential test holds it to that) at a
// fraction of the cost: canonical bytes have a known layout, so a
// canonjson.Scanner checks them in one pass and the history and the
// results are sliced out of src instead of being decoded value by value
// through reflection. Only the small manifest goes through encoding/json.
// The raw values alias src. Any error, any key it does not expect and any
// text that is not canonical send the caller back to json.Unmarshal, so
// errors and odd shapes behave exactly as before.
func decodeCanonical(src []byte, b *Bundle) error {
	s := canonjson.NewScanner(src)
	if !s.Skip(`{"history":[`) {
		return errUnexpected
	}
	b.History = []json.RawMessage{}
	for i := 0; s.Peek() != ']'; i++ {
		if i > 0 && !s.Skip(",") {
			return errUnexpected
		}
		v, err := s.Value()
		if err != nil {
			return err
		}
		b.History = append(b.History, json.RawMessage(v[:len(v):len(v)]))
	}
	if !s.Skip(`],"manifest":`) {
		return errUnexpected
	}
	v, err := s.Value()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(v, &b.Manifest); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if !s.Skip(`,"results":[`) {
		return errUnexpected
	}
	b.Results = []Result{}
	var r Result
	visit := func(name, value []byte) error {
		switch string(name) {
		case "key":
			return decodeString(value, &r.Key)
		case "kind":
			return decodeString(value, &r.Kind)
		case "fingerprint":
			return decodeString(value, &r.Fingerprint)
		case "input":
			r.Input = json.RawMessage(value[:len(value):len(value)])
		case "start_seq":
			return decodeStartSeq(value, &r.StartSeq)
		case "result":
			r.Result = json.RawMessage(value[:len(value):len(value)])
		case "error":
			r.Error = json.RawMessage(value[:len(value):len(value)])
		default:
			return errUnexpected
		}
		return nil
	}
	for i := 0; s.Peek() != ']'; i++ {
		if (i > 0 && !s.Skip(",")) || s.Peek() != '{' {
			return errUnexpected
		}
		r = Result{}
		if _, err := s.Object(visit); err != nil {
			return err
		}
		b.Results = append(b.Results, r)
	}
	if !s.Skip("]}") || s.Pos() != len(src) {
		return errUnexpected
	}
	return nil
}

// decodeStartSeq decodes a result's start_seq, which validation checked.
func decodeStartSeq(v []byte, dst *int64) error {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return errUnexpected
	}
	*dst = n
	return nil
}

// decodeString decodes a canonical JSON string value into dst; null
// leaves it unchanged, as json.Unmarshal does.
func decodeString(v []byte, dst *string) error {
	switch {
	case string(v) == "null":
	case len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0:
		*dst = string(v[1 : len(v)-1])
	case len(v) >= 2 && v[0] == '"':
		return json.Unmarshal(v, dst)
	default:
		return errUnexpected
	}
	return nil
}

// decodeTrusted is decodeCanonical for bytes a Read produced, which are
// canonical by construction: it finds where values end without checking
// them again (a Scanner pass costs as much as the rest of Decode). Names
// it does not expect, and anything not laid out as a Read lays it out,
// return errUnexpected, and the caller falls back to decodeCanonical.
// FuzzRead holds Decode to json.Unmarshal on what Read accepts. history
// and results are the counts the Read found (0 when unknown): the slices
// are made that size once instead of growing. The results' keys, kinds
// and fingerprints (when they hold no escape) are substrings of src
// itself instead of a string each: like the raw values, which alias src,
// they require that nothing writes to src again.
func decodeTrusted(src []byte, b *Bundle, history, results int) error {
	const head = `{"history":[`
	if !bytes.HasPrefix(src, []byte(head)) {
		return errUnexpected
	}
	var i int
	var err error
	if b.History, i, err = sliceEvents(src, len(head), history); err != nil {
		return err
	}
	const man = `],"manifest":`
	if !bytes.HasPrefix(src[i:], []byte(man)) {
		return errUnexpected
	}
	i += len(man)
	j := skipValue(src, i)
	if j < 0 {
		return errUnexpected
	}
	if err := json.Unmarshal(src[i:j], &b.Manifest); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	i = j
	const res = `,"results":[`
	if !bytes.HasPrefix(src[i:], []byte(res)) {
		return errUnexpected
	}
	i += len(res)
	b.Results = make([]Result, 0, results)
	for i < len(src) && src[i] != ']' {
		if len(b.Results) > 0 {
			i++ // ','
		}
		var r Result
		if i >= len(src) || src[i] != '{' {
			return errUnexpected
		}
		i++
		for i < len(src) && src[i] != '}' {
			if src[i] == ',' {
				i++
			}
			end := skipValue(src, i)
			if end < 0 || end >= len(src) || src[end] != ':' {
				return errUnexpected
			}
			name := src[i:end]
			i = end + 1
			end = skipValue(src, i)
			if end < 0 {
				return errUnexpected
			}
			v := src[i:end:end]
			// The members resultDecoder.member sets too, inline here: a
			// function shared by both, called per member, cost this
			// Decode 6–15 % (measured).
			var err error
			switch string(name) {
			case `"key"`:
				r.Key, err = aliasString(v)
			case `"kind"`:
				r.Kind, err = aliasString(v)
			case `"fingerprint"`:
				r.Fingerprint, err = aliasString(v)
			case `"input"`:
				r.Input = json.RawMessage(v)
			case `"start_seq"`:
				err = decodeStartSeq(v, &r.StartSeq)
			case `"result"`:
				r.Result = json.RawMessage(v)
			case `"error"`:
				r.Error = json.RawMessage(v)
			default:
				err = errUnexpected
			}
			if err != nil {
				return err
			}
			i = end
		}
		i++ // '}'
		b.Results = append(b.Results, r)
	}
	if string(src[min(i, len(src)):]) != "]}" {
		return errUnexpected
	}
	return nil
}

// decodeHead decodes the history and the manifest of c, whose results Read
// decoded (Options.Decode), as decodeTrusted does: the history's events
// alias c's bytes.
func decodeHead(c *Canonical, b *Bundle) error {
	var err error
	if b.History, _, err = sliceEvents(c.head[1], 0, c.summary.HistoryCount); err != nil {
		return err
	}
	if err := json.Unmarshal(c.head[3], &b.Manifest); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// sliceEvents slices the comma-separated history events of src from i,
// up to its end or a ']', into a slice made for n of them; it returns
// where it stopped.
func sliceEvents(src []byte, i, n int) ([]json.RawMessage, int, error) {
	events := make([]json.RawMessage, 0, n)
	for i < len(src) && src[i] != ']' {
		if len(events) > 0 {
			i++ // ','
		}
		j := skipValue(src, i)
		if j < 0 {
			return nil, i, errUnexpected
		}
		events = append(events, json.RawMessage(src[i:j:j]))
		i = j
	}
	return events, i, nil
}

// resultDecoder decodes a result's members as Read's fast path checks
// them (Options.Decode), as decodeTrusted would: the raw values and the
// strings without escapes alias the bytes read. ok turns false on a member
// decodeTrusted would not take, and the results are then dropped.
type resultDecoder struct {
	results []Result
	r       Result
	ok      bool
}

// member decodes one member of the result being read.
func (d *resultDecoder) member(name, v []byte) {
	if !d.ok {
		return
	}
	v = v[:len(v):len(v)]
	var err error
	switch string(name) {
	case "key":
		d.r.Key, err = aliasString(v)
	case "kind":
		d.r.Kind, err = aliasString(v)
	case "fingerprint":
		d.r.Fingerprint, err = aliasString(v)
	case "input":
		d.r.Input = json.RawMessage(v)
	case "start_seq":
		err = decodeStartSeq(v, &d.r.StartSeq)
	case "result":
		d.r.Result = json.RawMessage(v)
	case "error":
		d.r.Error = json.RawMessage(v)
	default:
		err = errUnexpected
	}
	d.ok = err == nil
}

// end adds the result read, size bytes long, with rest bytes of the
// bundle after it: the first result sizes the slice for as many more of
// its size as rest holds, but for no more than one per 256 bytes, so that
// a small first result before large ones cannot make the slice much larger
// than the bundle (it grows as needed past that).
func (d *resultDecoder) end(size, rest int) {
	if d.ok {
		if d.results == nil {
			d.results = make([]Result, 0, 1+rest/max(size+1, 256))
		}
		d.results = append(d.results, d.r)
	}
	d.r = Result{}
}

// aliasString decodes the canonical JSON string v, as a string sharing
// v's memory when it has no escape. It returns the string rather than
// writing through a pointer, so that the Result being read stays on the
// stack.
func aliasString(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return unsafe.String(&v[1], len(v)-2), nil
	}
	var s string
	err := decodeString(v, &s)
	return s, err
}
