package maintain_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/worker/internal/maintain"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*call).DelayDo.func1"))
}

func do(t *testing.T, c valkey.Client, cmd valkey.Completed) valkey.ValkeyResult {
	t.Helper()
	r := c.Do(context.Background(), cmd)
	if err := r.Error(); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNewChecksDeps(t *testing.T) {
	if _, err := maintain.New(maintain.Config{Consumer: "me"}, maintain.Deps{}); err == nil {
		t.Fatal("New without a client: no error")
	}
}

// A pass trims the acked entries only (never a pending or undelivered
// one) and deletes the idle consumers without pending entries, except
// its own.
func TestPass(t *testing.T) {
	ns := testenv.UniqueName(t, "maintain")
	c := testenv.ValkeyClientAt(t, testenv.ValkeyURL(t), ns)
	ctx := context.Background()
	stream := ns + ":stream"
	do(t, c, c.B().XgroupCreate().Key(stream).Group("g").Id("0").Mkstream().Build())
	var ids []string
	for range 4 {
		id, _ := do(t, c, c.B().Xadd().Key(stream).Id("*").FieldValue().FieldValue("k", "v").Build()).ToString()
		ids = append(ids, id)
	}
	// "gone" reads 3 entries and acks the first 2; "me" reads nothing.
	do(t, c, c.B().Xreadgroup().Group("g", "gone").Count(3).Streams().Key(stream).Id(">").Build())
	do(t, c, c.B().Xack().Key(stream).Group("g").Id(ids[0], ids[1]).Build())
	do(t, c, c.B().Xreadgroup().Group("g", "me").Count(1).Streams().Key(stream).Id("0").Build())
	do(t, c, c.B().XgroupCreateconsumer().Key(stream).Group("g").Consumer("idle").Build())

	m, err := maintain.New(maintain.Config{Consumer: "me", ConsumerExpiry: 20 * time.Millisecond}, maintain.Deps{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the consumers idle past the expiry
	if err := m.Pass(ctx, []maintain.Stream{{Stream: stream, Group: "g"}}); err != nil {
		t.Fatal(err)
	}
	left, err := c.Do(ctx, c.B().Xrange().Key(stream).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range left {
		got = append(got, e.ID)
	}
	if !slices.Equal(got, ids[2:]) {
		t.Fatalf("after the pass the stream holds %v, want %v (the pending and the undelivered entries)", got, ids[2:])
	}
	consumers, err := c.Do(ctx, c.B().XinfoConsumers().Key(stream).Group("g").Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, raw := range consumers {
		f, err := raw.AsMap()
		if err != nil {
			t.Fatal(err)
		}
		v := f["name"]
		name, _ := v.ToString()
		names = append(names, name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"gone", "me"}) {
		t.Fatalf("consumers after the pass: %v, want gone (it has a pending entry) and me (its own)", names)
	}
	if n, err := m.Trim(ctx, ns+":missing"); err != nil || n != 0 {
		t.Fatalf("Trim of a missing stream: %d, %v; want 0, nil", n, err)
	}
	if gone, err := m.CleanupConsumers(ctx, ns+":missing", "g"); err != nil || len(gone) != 0 {
		t.Fatalf("CleanupConsumers of a missing stream: %v, %v; want none", gone, err)
	}
}
