package canonjson

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestShortestFixed: whatever shortestFixed accepts is what AppendFloat
// writes for the value (it only ever saves the parse), over random
// decimals around every limit it has, and it does accept the common
// cases (else the fast path would silently be gone).
func TestShortestFixed(t *testing.T) {
	check := func(s string) bool {
		intPart, frac, _ := strings.Cut(s, ".")
		ok := shortestFixed([]byte(intPart), []byte(frac))
		if ok {
			f, err := strconv.ParseFloat(s, 64)
			if got := string(AppendFloat(nil, f)); err != nil || got != s {
				t.Fatalf("shortestFixed(%q) = true, but the canonical form is %q (%v)", s, got, err)
			}
		}
		return ok
	}
	for _, s := range []string{"1.5", "0.5", "-2.25", "100.0", "0.0001", "0.1234", "123456789012345.0", "12345678901234.5", "0.000123456789012345"} {
		if !check(s) {
			t.Errorf("shortestFixed(%q) = false, want true", s)
		}
	}
	for _, s := range []string{"0.0", "-0.0", "0.00001", "1.50", "1234567890123456.0", "9007199254740993.0", "1234567890123456.5", "0.30000000000000004", "1.0000000000000002"} {
		if check(s) {
			t.Errorf("shortestFixed(%q) = true, want false", s)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	digits := func(n int, first byte) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + r.IntN(10))
		}
		if n > 0 && first != 0 {
			b[0] = first
		}
		return string(b)
	}
	for range 200_000 {
		intPart := "0"
		if n := r.IntN(18); n > 0 {
			intPart = digits(n, byte('1'+r.IntN(9)))
		}
		frac := strings.Repeat("0", r.IntN(6)) + digits(1+r.IntN(18), 0)
		if r.IntN(4) == 0 {
			frac = "0"
		}
		s := intPart + "." + frac
		if r.IntN(2) == 0 {
			s = "-" + s
		}
		check(s)
	}
}
