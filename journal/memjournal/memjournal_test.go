package memjournal_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/journaltest"
	"github.com/pyrula/caseworker/journal/memjournal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// withArchive asks newHarness for a real PostgreSQL archive.
type withArchive struct{ journal.Archive }

// newHarness returns a memory journal on a fake clock of its own; when
// opts.Archive is set it is replaced by a real archive, with a namespace of
// the subtest's own.
func newHarness(opts memjournal.Options) func(t *testing.T) *journaltest.Harness {
	return func(t *testing.T) *journaltest.Harness {
		clock := journaltest.NewClock(start)
		o := opts
		o.Now = clock.Now
		if o.Archive != nil {
			o.Namespace = testenv.UniqueName(t, "jt")
			o.Archive = archivetest.New(t, o.Namespace)
		}
		j, err := memjournal.New(o)
		if err != nil {
			t.Fatal(err)
		}
		ttl := o.CompletedTTL
		if ttl == 0 {
			ttl = journal.DefaultCompletedTTL
		}
		return &journaltest.Harness{Journal: j, CompletedTTL: ttl, Archived: o.Archive != nil, Advance: clock.Advance}
	}
}

func TestConformance(t *testing.T) {
	journaltest.Run(t, newHarness(memjournal.Options{}))
}

func TestConformanceShortTTL(t *testing.T) {
	journaltest.Run(t, newHarness(memjournal.Options{CompletedTTL: time.Minute, Namespace: "other"}))
}

// TestConformanceWithArchive runs the suite on the composition of a memory
// journal and the PostgreSQL archive.
func TestConformanceWithArchive(t *testing.T) {
	journaltest.Run(t, newHarness(memjournal.Options{Archive: withArchive{}}))
}

func TestNamespace(t *testing.T) {
	t.Parallel()
	j, err := memjournal.New(memjournal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Namespace() != journal.DefaultNamespace {
		t.Errorf("default namespace %q", j.Namespace())
	}
	if _, err := memjournal.New(memjournal.Options{Namespace: "a{b}"}); err == nil {
		t.Error("New accepted a namespace with braces")
	}
}
