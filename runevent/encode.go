package runevent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/pyrula/caseworker/canonjson"
)

// AppendJSON appends e's JSON to dst: one canonical object (names in
// code-point order, no white space, every value canonical), the bytes a
// journal stores, a bundle's history holds and `pyrula events` prints. It
// is the one encoder of events. A string that is not valid UTF-8 is
// written with each invalid byte replaced by U+FFFD (as encoding/json
// does). It fails, wrapping ErrInvalid, for an event without JSON form: no
// kind, a kind or Extra name that is not valid UTF-8, an Extra member
// named run_seq, kind or at, a raw value that canonical JSON refuses, an
// at or wake_at outside years 1–9999. On error dst is returned as it was.
func (e Event) AppendJSON(dst []byte) ([]byte, error) {
	out, _, err := e.appendJSON(dst, false)
	return out, err
}

// JSON returns AppendJSON(nil).
func (e Event) JSON() (json.RawMessage, error) { return e.AppendJSON(nil) }

// MarshalJSON implements json.Marshaler with AppendJSON. json.Marshal
// escapes <, >, &, U+2028 and U+2029 in what MarshalJSON returns (unless
// the Encoder's SetEscapeHTML(false)), so that its output is not the
// canonical bytes: use AppendJSON or JSON for those.
func (e Event) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil) }

// SplitJSON returns e's JSON with run_seq whatever e.RunSeq is, cut where
// the run_seq digits go: the event with run_seq n is head +
// strconv.Itoa(n) + tail. A journal that assigns run_seq as it stores
// the event (Valkey's append script) joins the pieces.
func (e Event) SplitJSON() (head, tail []byte, err error) {
	out, cut, err := e.AppendSplitJSON(nil)
	if err != nil {
		return nil, nil, err
	}
	return out[:cut:cut], out[cut:], nil
}

// AppendSplitJSON appends SplitJSON's pieces, joined, to dst and returns
// where in out the run_seq digits go (head is out[len(dst):cut], tail
// out[cut:]): many events encoded into one buffer. On error dst is
// returned as it was.
func (e Event) AppendSplitJSON(dst []byte) (out []byte, cut int, err error) {
	start := len(dst)
	out, off, err := e.appendJSON(dst, true)
	return out, start + off, err
}

// headNames are the names of the members every event has.
var headNames = []string{nameAt, nameKind, nameRunSeq}

// appendJSON writes the event; with split it writes run_seq without its
// digits and returns the offset (from the start of the object) where they
// go.
func (e *Event) appendJSON(dst []byte, split bool) ([]byte, int, error) {
	if err := e.checkHead(); err != nil {
		return dst, 0, err
	}
	kindMembers := membersOf(e.Kind)
	// The Extra members that are not members of the kind, sorted.
	var extraBuf [8]string
	extra := extraBuf[:0]
	for name := range e.Extra {
		if _, ok := memberOf(e.Kind, name); ok {
			continue
		}
		if err := checkName(name, e.Kind); err != nil {
			return dst, 0, err
		}
		extra = append(extra, name)
	}
	slices.Sort(extra) // the byte order of UTF-8 is code-point order

	start, off := len(dst), 0
	dst = append(dst, '{')
	first := true
	// name writes a member's name and colon from its quoted form q
	// ("name":), or from n when q is empty.
	name := func(q, n string) {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		if q != "" {
			dst = append(dst, q...)
			return
		}
		dst = appendString(dst, n)
		dst = append(dst, ':')
	}
	var err error
	// Merge the head names, the kind's members and Extra's, all sorted.
	h, k, x := 0, 0, 0
	for h < len(headNames) || k < len(kindMembers) || x < len(extra) {
		next, which := "", 0
		if h < len(headNames) {
			next, which = headNames[h], 1
		}
		if k < len(kindMembers) && (which == 0 || memberNames[kindMembers[k]] < next) {
			next, which = memberNames[kindMembers[k]], 2
		}
		if x < len(extra) && (which == 0 || extra[x] < next) {
			next, which = extra[x], 3
		}
		switch which {
		case 1:
			h++
			switch next {
			case nameAt:
				name(`"at":`, "")
				dst = append(dst, '"')
				dst = AppendTime(dst, e.At)
				dst = append(dst, '"')
			case nameKind:
				name(`"kind":`, "")
				dst = appendString(dst, string(e.Kind))
			case nameRunSeq:
				if split {
					name(`"run_seq":`, "")
					off = len(dst) - start
				} else if e.RunSeq > 0 {
					name(`"run_seq":`, "")
					dst = strconv.AppendInt(dst, e.RunSeq, 10)
				}
			}
		case 2:
			m := kindMembers[k]
			k++
			switch src, v := e.sourceOf(m); src {
			case fromField:
				name(quotedMemberNames[m], "")
				dst, err = e.appendField(dst, m)
			case fromExtra:
				name(quotedMemberNames[m], "")
				dst, err = appendRaw(dst, v, next, e.Kind)
			case fromDefault:
				name(quotedMemberNames[m], "")
				dst = appendDefault(dst, m)
			}
		case 3:
			x++
			name("", next)
			dst, err = appendRaw(dst, e.Extra[next], next, e.Kind)
		}
		if err != nil {
			return dst[:start], 0, err
		}
	}
	return append(dst, '}'), off, nil
}

// quotedMemberNames are memberNames as they are written, quoted with their
// colon.
var quotedMemberNames = func() (q [nMembers]string) {
	for m, n := range memberNames {
		q[m] = string(appendString(nil, n)) + ":"
	}
	return q
}()

// checkHead refuses an event whose kind or at has no JSON form.
func (e *Event) checkHead() error {
	switch {
	case e.Kind == "":
		return fmt.Errorf("%w: an event without a kind", ErrInvalid)
	case !utf8.ValidString(string(e.Kind)):
		return fmt.Errorf("%w: event kind %q is not valid UTF-8", ErrInvalid, e.Kind)
	case !yearOK(e.At):
		return fmt.Errorf("%w: a %s event at %v, outside years 1–9999", ErrInvalid, e.Kind, e.At)
	}
	return nil
}

// checkName refuses a member name an event's Extra may not have.
func checkName(name string, kind Kind) error {
	switch {
	case reserved(name):
		return fmt.Errorf("%w: member %q of a %s event is the event's own", ErrInvalid, name, kind)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: member name %q of a %s event is not valid UTF-8", ErrInvalid, name, kind)
	}
	return nil
}

// The first instant of year 1 and of year 10000, in UTC.
var (
	year1     = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	year10000 = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// yearOK reports whether t's year (in UTC) has four digits, so that t
// reads back from its RFC 3339 form.
func yearOK(t time.Time) bool { return !t.Before(year1) && t.Before(year10000) }

// appendField appends the value of m's field, which is not zero.
func (e *Event) appendField(dst []byte, m member) ([]byte, error) {
	switch m {
	case mCall:
		c := e.Call
		dst = append(dst, `{"effect":`...)
		dst = appendString(dst, string(c.Effect))
		dst = append(dst, `,"fingerprint":`...)
		dst = appendString(dst, c.Fingerprint)
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, c.Key)
		dst = append(dst, `,"kind":`...)
		dst = appendString(dst, string(c.Kind))
		return append(dst, '}'), nil
	case mCode:
		return appendString(dst, string(e.Code)), nil
	case mCodeVersion:
		return appendString(dst, e.CodeVersion), nil
	case mInput:
		return appendRaw(dst, e.Input, memberNames[m], e.Kind)
	case mInputs:
		return appendRaw(dst, e.Inputs, memberNames[m], e.Kind)
	case mMessage:
		return appendString(dst, e.Message), nil
	case mProvenance:
		return appendString(dst, e.Provenance), nil
	case mResult:
		return appendRaw(dst, e.Result, memberNames[m], e.Kind)
	case mSeq:
		return strconv.AppendInt(dst, e.CallSeq, 10), nil
	case mStopKey:
		return appendString(dst, e.StopKey), nil
	case mStopToken:
		return appendString(dst, e.StopToken), nil
	case mTool:
		return appendString(dst, e.Tool), nil
	case mWakeAt:
		if !yearOK(e.WakeAt) {
			return dst, fmt.Errorf("%w: wake_at %v of a %s event is outside years 1–9999", ErrInvalid, e.WakeAt, e.Kind)
		}
		dst = append(dst, '"')
		dst = e.WakeAt.UTC().AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), nil
	}
	return dst, nil
}

// appendDefault appends the value of m when its field is zero.
func appendDefault(dst []byte, m member) []byte {
	switch m {
	case mCode, mCodeVersion, mMessage:
		return append(dst, `""`...)
	case mSeq:
		return append(dst, '0')
	}
	return append(dst, "null"...)
}

// appendRaw appends the canonical form of v, the raw value of the member
// name (null when empty).
func appendRaw(dst []byte, v json.RawMessage, name string, kind Kind) ([]byte, error) {
	if len(v) == 0 {
		return append(dst, "null"...), nil
	}
	out, err := canonjson.Append(dst, v)
	if err != nil {
		return dst, fmt.Errorf("%w: member %q of a %s event: %w", ErrInvalid, name, kind, err)
	}
	return out, nil
}

// appendString appends s as a canonical JSON string, each byte of s that
// is not part of valid UTF-8 replaced by U+FFFD.
func appendString(dst []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = validUTF8(s)
	}
	// AppendQuoted only reads its argument: view s's bytes without a copy.
	return canonjson.AppendQuoted(dst, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// validUTF8 returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as encoding/json writes such a string.
func validUTF8(s string) string {
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}
