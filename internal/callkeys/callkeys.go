// Package callkeys is a map and a set keyed by a call's kind and key.
//
// A Go map whose key is a struct of two strings hashes and compares it
// through the generic path, about four times slower than a map with
// string keys on 10,000 keys; a run looks a call up once or more per
// call. Map keeps one string-keyed map per kind (a run has a few kinds),
// so that each lookup is the fast path of a string key. Set keeps the
// keys a run's counters make as bits, about six times faster again to add
// (BenchmarkSetAdd).
package callkeys

// Map maps a call's (kind, key) to a V. The zero Map is empty and ready to
// use; it is not safe for concurrent use.
type Map[V any] struct {
	kinds map[string]map[string]V
	hint  int // the size the first kind's map is made with
}

// New returns an empty Map that holds about hint keys without growing.
func New[V any](hint int) *Map[V] { return &Map[V]{hint: hint} }

// Get returns the value of (kind, key).
func (m *Map[V]) Get(kind, key string) (V, bool) {
	v, ok := m.kinds[kind][key]
	return v, ok
}

// Has reports whether m holds (kind, key).
func (m *Map[V]) Has(kind, key string) bool {
	_, ok := m.kinds[kind][key]
	return ok
}

// Set sets the value of (kind, key) and reports whether the key is new.
func (m *Map[V]) Set(kind, key string, v V) (added bool) {
	keys := m.kinds[kind]
	if keys == nil {
		if m.kinds == nil {
			m.kinds = make(map[string]map[string]V, 1)
		}
		keys = make(map[string]V, m.hint)
		m.hint = 0
		m.kinds[kind] = keys
	}
	n := len(keys)
	keys[key] = v
	return len(keys) != n
}
