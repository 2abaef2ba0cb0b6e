package callkeys

// Set is a set of calls' (kind, key). The zero Set is empty and ready to
// use; it is not safe for concurrent use.
//
// A run's counters make keys "<name>:<n>" (and "<n>" for kinds without a
// name), n counting up from 0: Set keeps those as bits, one bitmap per
// kind and name, so that adding the key of a long run's next call is a
// bit set instead of a string-keyed map insert (a case run's journal adds
// one per call). Any other key, and a counted one too far past its
// bitmap's end, goes in a Map; a key is in the Set when either holds it.
type Set struct {
	counted map[string]map[string]*bitmap // kind → name → n's
	last    struct {
		kind, name string
		bits       *bitmap
	}
	other Map[struct{}]
}

// bitmap is a growable set of small integers.
type bitmap []uint64

// Has reports whether s holds (kind, key).
func (s *Set) Has(kind, key string) bool {
	if name, n, ok := counted(key); ok {
		if b := s.lookup(kind, name, false); b != nil && b.has(n) {
			return true
		}
	}
	return s.other.Has(kind, key)
}

// Add adds (kind, key) to s and reports whether it was not there before.
func (s *Set) Add(kind, key string) bool {
	name, n, ok := counted(key)
	if !ok {
		return s.other.Set(kind, key, struct{}{})
	}
	b := s.lookup(kind, name, true)
	switch {
	case b.has(n) || s.other.Has(kind, key):
		return false
	case n < 2*len(*b)*64+1024:
		b.set(n)
		return true
	default:
		// Far past the bitmap's end (a fixed key that looks counted):
		// the bitmap stays as large as the keys counted into it.
		return s.other.Set(kind, key, struct{}{})
	}
}

// lookup returns the bitmap of kind and name, made when create is set
// (else nil when there is none).
func (s *Set) lookup(kind, name string, create bool) *bitmap {
	if l := &s.last; l.bits != nil && l.kind == kind && l.name == name {
		return l.bits
	}
	names := s.counted[kind]
	b := names[name]
	if b == nil {
		if !create {
			return nil
		}
		if s.counted == nil {
			s.counted = map[string]map[string]*bitmap{}
		}
		if names == nil {
			names = map[string]*bitmap{}
			s.counted[kind] = names
		}
		b = new(bitmap)
		names[name] = b
	}
	s.last.kind, s.last.name, s.last.bits = kind, name, b
	return b
}

// counted splits a key a counter makes, "<name>:<n>" or "<n>", n written
// as strconv.Itoa writes a non-negative int; ok is false for any other key.
func counted(key string) (name string, n int, ok bool) {
	i := len(key)
	for i > 0 && key[i-1] >= '0' && key[i-1] <= '9' {
		i--
	}
	digits := key[i:]
	switch {
	case len(digits) == 0 || len(digits) > 9 || digits[0] == '0' && len(digits) > 1:
		return "", 0, false
	case i == 0:
	case key[i-1] != ':' || i == 1:
		return "", 0, false
	default:
		name = key[:i-1]
	}
	for _, c := range []byte(digits) {
		n = n*10 + int(c-'0')
	}
	return name, n, true
}

func (b *bitmap) has(n int) bool {
	w := n / 64
	return w < len(*b) && (*b)[w]&(1<<(uint(n)%64)) != 0
}

func (b *bitmap) set(n int) {
	w := n / 64
	if w >= len(*b) {
		grown := make(bitmap, max(w+1, 2*len(*b), 4))
		copy(grown, *b)
		*b = grown
	}
	(*b)[w] |= 1 << (uint(n) % 64)
}
