// Package fuzztext holds the string transforms that the redaction fuzzers
// (the CLI's and the store URLs') use to draw inputs and to check outputs.
package fuzztext

import (
	"strconv"
	"strings"
)

// Within maps every byte of s that is not in alphabet to one that is.
func Within(s, alphabet string) string {
	b := []byte(s)
	for i, c := range b {
		if strings.IndexByte(alphabet, c) < 0 {
			b[i] = alphabet[int(c)%len(alphabet)]
		}
	}
	return string(b)
}

// Shift changes each letter g–z (either case) to the next (z to g), so
// that a hex digit stays as it is and a secret's letters change.
func Shift(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'g' && c < 'z', c >= 'G' && c < 'Z':
			b[i] = c + 1
		case c == 'z', c == 'Z':
			b[i] = c - 'z' + 'g'
		}
	}
	return string(b)
}

// Keywords counts the words redaction looks for that s holds.
func Keywords(s string) string {
	s = strings.ToLower(s)
	var out []string
	for _, w := range []string{"password", "passwd", "secret", "token", "key", "credential", "signature"} {
		out = append(out, strconv.Itoa(strings.Count(s, w)))
	}
	return strings.Join(out, ",")
}
