package callkeys

import (
	"fmt"
	"testing"
)

// TestMap: keys of different kinds are apart, a key set again is not new
// and takes the new value, and the zero Map and a sized one behave alike,
// against a map keyed by kind and key joined.
func TestMap(t *testing.T) {
	for _, m := range []*Map[int]{{}, New[int](100)} {
		want := map[string]int{}
		if _, ok := m.Get("step", "a"); ok || m.Has("step", "a") {
			t.Fatal("an empty Map holds a key")
		}
		for i := range 1000 {
			kind := []string{"step", "model", "tool", ""}[i%4]
			key := fmt.Sprint(i % 300)
			joined := kind + "\x00" + key
			_, had := want[joined]
			want[joined] = i
			if added := m.Set(kind, key, i); added == had {
				t.Fatalf("Set(%q, %q): added %v, the key was there before: %v", kind, key, added, had)
			}
		}
		for _, kind := range []string{"step", "model", "tool", "", "signal"} {
			for i := range 310 {
				key := fmt.Sprint(i)
				w, wok := want[kind+"\x00"+key]
				if v, ok := m.Get(kind, key); v != w || ok != wok || m.Has(kind, key) != wok {
					t.Fatalf("Get(%q, %q) = %d %v, want %d %v", kind, key, v, ok, w, wok)
				}
			}
		}
	}
}
