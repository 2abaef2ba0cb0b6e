package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"

	"github.com/pyrula/caseworker/messages"
)

// Hash names a bundle: the lowercase hex SHA-256 of its canonical bytes.
type Hash string

// ParseHash checks that s is 64 lowercase hex characters. Anything else is an
// *messages.Error with code invalid_fixture_hash.
func ParseHash(s string) (Hash, error) {
	if !ValidHash(s) {
		return "", messages.Errorf(messages.InvalidFixtureHash,
			"fixture hash %q is not 64 lowercase hex characters", truncate(s, 80))
	}
	return Hash(s), nil
}

// ValidHash reports whether s is 64 lowercase hex characters.
func ValidHash(s string) bool { return validHash(s) }

// validHash is ValidHash of a string or of bytes (no conversion, which
// would allocate).
func validHash[T string | []byte](s T) bool {
	if len(s) != sha256.Size*2 {
		return false
	}
	// One table lookup per character and no branch on it: the digits and
	// letters of a hash come in random order, which a comparison per
	// character mispredicts (a case run checks one hash per call).
	var bad byte
	for i := 0; i < len(s); i++ {
		bad |= notLowerHex[s[i]]
	}
	return bad == 0
}

// notLowerHex is 1 for every byte that is not 0-9 or a-f.
var notLowerHex = func() (t [256]byte) {
	for c := range t {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			t[c] = 1
		}
	}
	return t
}()

// String returns the hash as hex.
func (h Hash) String() string { return string(h) }

// Short returns the first 12 characters, for messages.
func (h Hash) Short() string {
	if len(h) > 12 {
		return string(h[:12])
	}
	return string(h)
}

// newHasher returns the hash function of bundle names.
func newHasher() hash.Hash { return sha256.New() }

// hashOf formats a finished hasher as a Hash.
func hashOf(h hash.Hash) Hash { return Hash(hex.EncodeToString(h.Sum(nil))) }

// HashBytes returns the Hash of canonical bytes b.
func HashBytes(b []byte) Hash {
	sum := sha256.Sum256(b)
	return Hash(hex.EncodeToString(sum[:]))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
