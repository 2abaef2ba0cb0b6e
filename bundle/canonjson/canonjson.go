// Package canonjson writes canonical JSON: byte-for-byte what Python's
// json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
// writes for the value json.loads reads from the same text, with the rules
// and refusals of DESIGN.md §4. It is the basis of bundle hashes and call
// fingerprints. It imports nothing of the project.
package canonjson

import "errors"

// Limits that match what CPython accepts.
const (
	// MaxDepth is the deepest nesting of arrays and objects accepted.
	MaxDepth = 1000
	// MaxIntDigits is the most digits an integer may have (CPython's
	// int max_str_digits default).
	MaxIntDigits = 4300
)

// ErrInvalid is wrapped by every error about the input text: invalid JSON,
// invalid UTF-8, lone surrogates, NaN/Infinity, overflowing numbers,
// duplicate object keys, too deep nesting, too long integers.
var ErrInvalid = errors.New("canonjson: invalid input")

// Append appends the canonical form of the single JSON value in src to dst.
// Whitespace around the value is allowed; anything else after it is an error.
func Append(dst, src []byte) ([]byte, error) { return nil, ErrInvalid }

// Canonicalize returns the canonical form of the JSON value in src.
func Canonicalize(src []byte) ([]byte, error) { return Append(nil, src) }
