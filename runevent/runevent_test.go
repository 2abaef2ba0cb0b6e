package runevent_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pyrula/caseworker/runevent"
)

// TestKinds pins the spelling of every kind: it is on the wire, in every
// journal and every bundle's history.
func TestKinds(t *testing.T) {
	want := []string{"run:submitted", "run:start", "call:start", "call:done", "case:call", "case:charge", "case:outcome", "suite:plan", "suite:progress", "suite:outcome", "run:complete", "run:error", "run:cancelled"}
	var got []string
	for _, k := range runevent.Kinds() {
		got = append(got, string(k))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %q, want %q", got, want)
	}
	for _, k := range runevent.Kinds() {
		terminal := k == runevent.RunComplete || k == runevent.RunError || k == runevent.RunCancelled
		if k.Terminal() != terminal {
			t.Errorf("%s.Terminal() = %v", k, k.Terminal())
		}
	}
	if runevent.Kind("run:completed").Terminal() || runevent.Kind("").Terminal() {
		t.Error("an unknown kind is terminal")
	}
}

// TestTime pins the one precision of an event's at: microseconds, in UTC,
// six digits always.
func TestTime(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2025, 3, 14, 9, 26, 53, 37512999, time.UTC), "2025-03-14T09:26:53.037512Z"},
		{time.Date(2025, 3, 14, 10, 26, 53, 0, paris), "2025-03-14T09:26:53.000000Z"},
		{time.Date(2025, 3, 14, 9, 26, 53, 999, time.UTC), "2025-03-14T09:26:53.000000Z"},
	} {
		if got := runevent.FormatTime(tc.in); got != tc.want {
			t.Errorf("FormatTime(%v) = %s, want %s", tc.in, got, tc.want)
		}
		if got := string(runevent.AppendTime([]byte("at="), tc.in)); got != "at="+tc.want {
			t.Errorf("AppendTime(%v) = %s", tc.in, got)
		}
		back, err := time.Parse(time.RFC3339Nano, tc.want)
		if err != nil {
			t.Fatal(err)
		}
		if tr := runevent.Truncate(tc.in); !tr.Equal(back) || tr.Location() != time.UTC {
			t.Errorf("Truncate(%v) = %v, want %v in UTC", tc.in, tr, back)
		}
	}
}

// TestAppendTimeIsTheLayout holds AppendTime to time.AppendFormat with
// TimeLayout on the edges of its digit-by-digit years and on random
// instants and zones.
func TestAppendTimeIsTheLayout(t *testing.T) {
	times := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("W", -3600)), // 10000 in UTC
		time.Date(2024, 2, 29, 12, 0, 0, 1000, time.UTC),
		{},
		time.Unix(0, 0),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		zone := time.FixedZone("Z", (r.IntN(49)-24)*1800)
		times = append(times, time.Unix(r.Int64N(400_000_000_000)-200_000_000_000, r.Int64N(1e9)).In(zone))
	}
	for _, tm := range times {
		want := tm.UTC().AppendFormat([]byte("x"), runevent.TimeLayout)
		if got := runevent.AppendTime([]byte("x"), tm); string(got) != string(want) {
			t.Fatalf("AppendTime(%v) = %s, want %s", tm, got, want)
		}
		if got := runevent.FormatTime(tm); got != string(want[1:]) {
			t.Fatalf("FormatTime(%v) = %s, want %s", tm, got, want[1:])
		}
	}
}
