package callkeys

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// setKeys are keys of every form Set tells apart: counted ones (with a
// name, bare, far past the bitmaps' ends), keys that only look counted
// (a leading zero, an empty name, too many digits) and others.
func setKeys(r *rand.Rand) string {
	n := r.IntN(3000)
	switch r.IntN(10) {
	case 0:
		return fmt.Sprint(n)
	case 1:
		return fmt.Sprintf("fetch:%03d", n%50)
	case 2:
		return fmt.Sprintf(":%d", n%50)
	case 3:
		return fmt.Sprintf("gather:%d", r.IntN(1<<30))
	case 4:
		return []string{"", ":", "a:", "0", "00", "a:b:3", "fetch1:2", "9999999999", "x:1234567890"}[r.IntN(9)]
	case 5:
		return fmt.Sprintf("toolu_%d", n%100)
	default:
		return fmt.Sprintf("%s:%d", []string{"fetch", "quote", "a:b"}[r.IntN(3)], n)
	}
}

// TestSet: Set holds exactly what a map of kind and key joined holds,
// whatever the form of the keys and the order they come in.
func TestSet(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var s Set
		want := map[string]bool{}
		for range 5000 {
			kind, key := []string{"step", "model", "sleep", ""}[r.IntN(4)], setKeys(r)
			joined := kind + "\x00" + key
			if got := s.Has(kind, key); got != want[joined] {
				t.Fatalf("seed %d: Has(%q, %q) = %v, want %v", seed, kind, key, got, want[joined])
			}
			if added := s.Add(kind, key); added == want[joined] {
				t.Fatalf("seed %d: Add(%q, %q) = %v, the key was there before: %v", seed, kind, key, added, want[joined])
			}
			want[joined] = true
			if !s.Has(kind, key) {
				t.Fatalf("seed %d: after Add(%q, %q) the Set does not hold it", seed, kind, key)
			}
		}
	}
}

// A run's counted keys stay in bitmaps as large as the keys counted, and a
// key far past a bitmap's end does not grow it.
func TestSetCountedKeysInBitmaps(t *testing.T) {
	var s Set
	for i := range 10_000 {
		if !s.Add("step", fmt.Sprintf("fetch:%d", i)) {
			t.Fatalf("fetch:%d not added", i)
		}
	}
	s.Add("step", "fetch:999999999")
	b := s.counted["step"]["fetch"]
	if b == nil || len(*b) > 2*10_000/64+16 || s.other.Has("step", "fetch:5") || !s.other.Has("step", "fetch:999999999") {
		t.Fatalf("bitmap of %d words; fetch:5 in the map: %v", len(*b), s.other.Has("step", "fetch:5"))
	}
}

// FuzzCounted: counted splits a key exactly when strconv would write the
// key back from its parts.
func FuzzCounted(f *testing.F) {
	for _, k := range []string{"fetch:12", "0", "a:b:3", ":5", "fetch:012", "x:", ""} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		name, n, ok := counted(key)
		if !ok {
			return
		}
		back := fmt.Sprint(n)
		if name != "" {
			back = name + ":" + back
		}
		if back != key {
			t.Fatalf("counted(%q) = %q, %d, which writes back %q", key, name, n, back)
		}
	})
}

// BenchmarkSetAdd: the keys of a 10,000-call run added to a Set, against
// the Map it replaces in a case run's journal.
func BenchmarkSetAdd(b *testing.B) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("fetch:%d", i)
	}
	b.Run("set", func(b *testing.B) {
		for range b.N {
			var s Set
			for _, k := range keys {
				s.Add("step", k)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for range b.N {
			var m Map[struct{}]
			for _, k := range keys {
				m.Set("step", k, struct{}{})
			}
		}
	})
}
