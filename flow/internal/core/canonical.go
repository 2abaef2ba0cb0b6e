package core

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"unsafe"

	"github.com/pyrula/caseworker/bundle/volatile"
	"github.com/pyrula/caseworker/canonjson"
)

// marshalCanonical returns the canonical JSON of v: what json.Marshal then
// canonical give, written directly for the usual types.
func marshalCanonical(v any) ([]byte, error) {
	if raw, ok := appendGo(v); ok {
		return raw, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return canonical(raw)
}

// scratch holds the buffers appendGo writes in.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// appendGo is canonjson.AppendGo(nil, v) in a buffer of its own size: the
// value is written in a recycled buffer and copied out once.
func appendGo(v any) ([]byte, bool) {
	buf := scratch.Get().(*[]byte)
	out, ok := canonjson.AppendGo((*buf)[:0], v)
	var kept []byte
	if ok {
		kept = bytes.Clone(out)
	}
	if cap(out) <= 64<<10 {
		*buf = out[:0]
		scratch.Put(buf)
	}
	return kept, ok
}

// maxSharedInput is the largest canonical input callInput.keep keeps in
// one allocation with its fingerprint, so that a fingerprint kept after its
// input is dropped holds at most this many bytes with it.
const maxSharedInput = 1 << 10

// callInput is a call's input written as canonical JSON: canon, in a
// recycled buffer (buf) until release, or on the heap when encoding/json
// wrote it; err when it could not be written.
type callInput struct {
	buf   *[]byte
	canon []byte
	err   error
}

// writeInput writes v as Fingerprint does: canonjson.AppendGo in a recycled
// buffer, else encoding/json and canonical.
func writeInput(v any) callInput {
	buf := scratch.Get().(*[]byte)
	if out, ok := canonjson.AppendGo((*buf)[:0], v); ok {
		return callInput{buf: buf, canon: out}
	}
	scratch.Put(buf)
	raw, err := json.Marshal(v)
	if err != nil {
		return callInput{err: fmt.Errorf("flow: encode input: %w", err)}
	}
	canon, err := canonical(raw)
	if err != nil {
		return callInput{err: fmt.Errorf("flow: canonicalize input: %w", err)}
	}
	return callInput{canon: canon}
}

// release hands the recycled buffer back; in.canon is not to be read after.
func (in *callInput) release() {
	if in.buf != nil && cap(in.canon) <= 64<<10 {
		*in.buf = in.canon[:0]
		scratch.Put(in.buf)
	}
	in.buf = nil
}

// keep returns the input to keep (out of the recycled buffer) and its
// fingerprint under rules (FingerprintRules). Without rules, an input of up
// to maxSharedInput bytes and its fingerprint share one allocation: the
// input's bytes, capped at their length, then the fingerprint's 64 hex
// digits, which nothing else can reach and so never change.
func (in *callInput) keep(rules *volatile.Rules) (input json.RawMessage, fingerprint string, err error) {
	if in.err != nil {
		return nil, "", in.err
	}
	input = in.canon
	n := len(input)
	switch {
	case in.buf != nil && rules == nil && n <= maxSharedInput:
		both := make([]byte, n+2*sha256.Size)
		copy(both, input)
		sum := sha256.Sum256(input)
		hex.Encode(both[n:], sum[:])
		return both[:n:n], unsafe.String(&both[n], 2*sha256.Size), nil
	case in.buf != nil:
		input = bytes.Clone(input)
	}
	if rules == nil {
		return input, fingerprintOf(input), nil
	}
	masked, err := rules.Mask(input)
	if err != nil {
		return nil, "", fmt.Errorf("flow: volatile rules: %w", err)
	}
	return input, fingerprintOf(masked), nil
}

// canonical returns the canonical JSON of raw, the output of encoding/json:
// raw itself, not a copy, when it is canonical already (the common case for
// call inputs and results), else canonjson.Canonicalize(raw).
func canonical(raw []byte) ([]byte, error) {
	if canonjson.IsCanonical(raw) {
		return raw, nil
	}
	return canonjson.Canonicalize(raw)
}
