package valkeyjournal_test

import (
	"testing"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/internal/archivetest"
	"github.com/pyrula/caseworker/journal/journaltest"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
)

// withArchive asks newHarness for a real PostgreSQL archive.
type withArchive struct{ journal.Archive }

// archiveFor returns the archive for a subtest's namespace.
func archiveFor(t *testing.T, ns string) journal.Archive { return archivetest.New(t, ns) }

// TestConformanceWithArchive runs the suite on the composition of Valkey and
// the PostgreSQL archive: finished runs are archived before their keys may
// expire, and reads fall back to the archive.
func TestConformanceWithArchive(t *testing.T) {
	journaltest.Run(t, newHarness(valkeyjournal.Options{Archive: withArchive{}}))
}

// TestConformanceClusterWithArchive is TestConformanceWithArchive on a
// Valkey Cluster.
func TestConformanceClusterWithArchive(t *testing.T) {
	journaltest.Run(t, newHarnessOn(testenv.ValkeyClusterClient, valkeyjournal.Options{Archive: withArchive{}}))
}
