package canonjson

import (
	"math"
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

// AppendFloat builds fixed notation from the digits of the exponent form;
// this checks it against strconv's own fixed notation on random doubles of
// every magnitude and on round decimals near the switch points.
func TestAppendFloatFixed(t *testing.T) {
	ref := func(f float64) string {
		e := strconv.FormatFloat(f, 'e', -1, 64)
		exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		if exp < -4 || exp >= 16 {
			return e
		}
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(f float64) {
		if math.IsInf(f, 0) || math.IsNaN(f) || f == 0 {
			return
		}
		if got, want := string(AppendFloat(nil, f)), ref(f); got != want {
			t.Fatalf("AppendFloat(%v) = %s, want %s", f, got, want)
		}
	}
	for range 300000 {
		check(math.Float64frombits(rng.Uint64()))
		check(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(44)-22)))
	}
	for exp := -7; exp <= 18; exp++ {
		for _, m := range []float64{1, 1.5, 9.999999999999998, 123456789.125, 0.1, 7} {
			check(m * math.Pow(10, float64(exp)))
			check(-m * math.Pow(10, float64(exp)))
		}
	}
}
