package worker

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/filestore"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/store/storetest"
)

// TestMeteredStoreConformance: the metered wrapper is still a conforming
// store (it changes nothing the caller sees), over the file and memory
// backends.
func TestMeteredStoreConformance(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("file", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			s, err := filestore.Open(context.Background(), t.TempDir(), filestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return newMeteredStore(s, m)
		})
	})
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newMeteredStore(memstore.New(memstore.Options{}), m) })
	})
}

func TestStoreBackend(t *testing.T) {
	for identity, want := range map[string]string{
		"memory:":                       "memory",
		"file:///srv/cases":             "file",
		"postgres://db.example/cases":   "postgres",
		"postgresql://db.example/cases": "postgres",
		"s3://bucket/prefix":            "s3",
		"S3://bucket":                   "s3",
		"custom://x":                    "other",
		"":                              "other",
	} {
		if got := storeBackend(identity); got != want {
			t.Errorf("storeBackend(%q) = %q, want %q", identity, got, want)
		}
	}
}
