package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// errUnexpected makes Decode fall back to encoding/json, whose answer for an
// unexpected shape (an unknown or differently cased key) is the reference.
var errUnexpected = errors.New("bundle: unexpected shape")

// decodeCanonical decodes canonical bundle bytes into b. It gives what
// json.Unmarshal gives (the differential test holds it to that) at about
// half the cost: canonical bytes have a known layout, so the history and
// the results are sliced out of one copy of the input instead of being
// decoded value by value through reflection. Only the small manifest goes
// through encoding/json. Any error, and any key it does not expect, sends
// the caller back to json.Unmarshal, so errors and odd shapes behave
// exactly as before.
func decodeCanonical(src []byte, b *Bundle) error {
	// One copy that the raw values alias, as json.Unmarshal's copies would
	// not alias the Canonical's bytes.
	buf := append([]byte(nil), src...)
	dec := jsontext.NewDecoder(bytes.NewReader(buf))
	raw := func() (json.RawMessage, error) {
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		// ReadValue returns the value's bytes verbatim; they end at the
		// input offset.
		end := int(dec.InputOffset())
		start := end - len(v)
		return json.RawMessage(buf[start:end:end]), nil
	}
	if err := expect(dec, '{'); err != nil {
		return err
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return err
		}
		switch string(name) { // quoted as in the input; an escaped name falls back
		case `"history"`:
			if b.History, err = decodeArray(dec, b.History, raw); err != nil {
				return fmt.Errorf("history: %w", err)
			}
		case `"manifest"`:
			v, err := raw()
			if err != nil {
				return fmt.Errorf("manifest: %w", err)
			}
			if err := json.Unmarshal(v, &b.Manifest); err != nil {
				return fmt.Errorf("manifest: %w", err)
			}
		case `"results"`:
			if b.Results, err = decodeArray(dec, b.Results, func() (Result, error) { return decodeResult(dec, raw) }); err != nil {
				return fmt.Errorf("results: %w", err)
			}
		default:
			return errUnexpected
		}
	}
	if err := expect(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return errUnexpected // data after the top-level value
	}
	return nil
}

// decodeArray decodes a JSON array (or null, which leaves dst as it is)
// with one call of elem per element.
func decodeArray[T any](dec *jsontext.Decoder, dst []T, elem func() (T, error)) ([]T, error) {
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return dst, err
	}
	if err := expect(dec, '['); err != nil {
		return nil, err
	}
	dst = dst[:0]
	if dst == nil {
		dst = []T{}
	}
	for dec.PeekKind() != ']' {
		v, err := elem()
		if err != nil {
			return nil, err
		}
		dst = append(dst, v)
	}
	return dst, expect(dec, ']')
}

// decodeResult decodes one entry of results.
func decodeResult(dec *jsontext.Decoder, raw func() (json.RawMessage, error)) (Result, error) {
	var r Result
	if dec.PeekKind() == 'n' {
		_, err := dec.ReadToken()
		return r, err
	}
	if err := expect(dec, '{'); err != nil {
		return r, err
	}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return r, err
		}
		switch string(name) { // quoted as in the input; an escaped name falls back
		case `"key"`:
			err = decodeString(dec, &r.Key)
		case `"kind"`:
			err = decodeString(dec, &r.Kind)
		case `"fingerprint"`:
			err = decodeString(dec, &r.Fingerprint)
		case `"result"`:
			r.Result, err = raw()
		case `"error"`:
			r.Error, err = raw()
		default:
			err = errUnexpected
		}
		if err != nil {
			return r, err
		}
	}
	return r, expect(dec, '}')
}

// decodeString decodes a JSON string into dst; null leaves it unchanged,
// as json.Unmarshal does.
func decodeString(dec *jsontext.Decoder, dst *string) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	switch tok.Kind() {
	case '"':
		*dst = tok.String()
	case 'n':
	default:
		return fmt.Errorf("want a string, got %v", tok.Kind())
	}
	return nil
}

// expect reads one token that must be the delimiter d.
func expect(dec *jsontext.Decoder, d jsontext.Kind) error {
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if tok.Kind() != d {
		return fmt.Errorf("want %v, got %v", d, tok.Kind())
	}
	return nil
}
