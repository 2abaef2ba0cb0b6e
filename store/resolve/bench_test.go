package resolve_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/pgstore"
	"github.com/pyrula/caseworker/store/resolve"
	"github.com/pyrula/caseworker/store/storetest"
)

// BenchmarkBackends measures put and get throughput (MB/s of
// stored blob bytes, b.SetBytes) of 1 MiB and 64 MiB bundles on every
// backend in one run, each opened through resolve.Open from its URL:
//
//	<backend>/<put|get>/<1MiB|64MiB>   backend: memory, file, postgres, s3
//
// put is store.Save of a bundle not yet stored (created must be true); get
// is store.Get read to the end, which verifies the bytes (decompression and
// hashing are part of it). Bundles are built with bundle.Encode before the
// timer starts; Encode also compresses, so Save only moves the blob.
// postgres runs on a fresh migrated database (dropped at the end), s3 on a
// fresh bucket of the test gateway (emptied and deleted at the end); both
// skip, as the other tests do, when their testenv variables are unset.
//
// Every put iteration needs a bundle of its own, held in memory until the
// benchmark ends (and kept by the memory store), so run it with a fixed
// count:
//
//	scripts/test ./store/resolve -run '^$' -bench Backends -benchtime 3x
//
// (scripts/test always adds -race, which slows zstd and the verification a
// lot; for figures without it, start the services and run go test directly.)
func BenchmarkBackends(b *testing.B) {
	backends := []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"memory", func(*testing.B) string { return "memory:" }},
		{"file", func(b *testing.B) string { return "file://" + b.TempDir() }},
		{"postgres", benchPostgresURL},
		{"s3", benchS3URL},
	}
	sizes := []int{1 << 20, 64 << 20}
	if testing.Short() {
		sizes = sizes[:1] // the smoke run of scripts/test
	}
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			ctx := benchCtx(b)
			s, err := resolve.Open(ctx, be.url(b))
			if err != nil {
				b.Fatalf("resolve.Open: %v", err)
			}
			b.Cleanup(func() { s.Close() })
			// next is the index of the first bundle of each size not yet
			// put into s: b.Run calls a benchmark more than once.
			next := map[int]int{}
			b.Run("put", func(b *testing.B) {
				for _, size := range sizes {
					b.Run(sizeName(size), func(b *testing.B) {
						cs := benchBundles(b, size, next[size]+b.N)[next[size]:]
						next[size] += b.N
						b.SetBytes(blobSize(b, cs[0]))
						b.ResetTimer()
						for i := range b.N {
							created, err := store.Save(ctx, s, cs[i])
							if err != nil || !created {
								b.Fatalf("Save: created=%v, %v; want a new bundle stored", created, err)
							}
						}
					})
				}
			})
			b.Run("get", func(b *testing.B) {
				for _, size := range sizes {
					b.Run(sizeName(size), func(b *testing.B) {
						c := benchBundles(b, size, 1)[0]
						if _, err := store.Save(ctx, s, c); err != nil {
							b.Fatalf("Save: %v", err)
						}
						b.SetBytes(blobSize(b, c))
						b.ResetTimer()
						for range b.N {
							rc, err := store.Get(ctx, s, c.Hash())
							if err != nil {
								b.Fatalf("Get: %v", err)
							}
							// io.Copy returns nil only when the verifying
							// reader ended with io.EOF: the hash matched.
							n, err := io.Copy(io.Discard, rc)
							if cerr := rc.Close(); err == nil {
								err = cerr
							}
							if err != nil || n != c.Size() {
								b.Fatalf("Get read %d of %d canonical bytes: %v", n, c.Size(), err)
							}
						}
					})
				}
			})
		})
	}
}

func sizeName(size int) string { return fmt.Sprintf("%dMiB", size>>20) }

func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// blobSize is the size of c's zstd blob, the bytes a backend stores.
func blobSize(b *testing.B, c *bundle.Canonical) int64 {
	b.Helper()
	n, err := io.Copy(io.Discard, c.Blob())
	if err != nil {
		b.Fatalf("blob: %v", err)
	}
	return n
}

// bundleCache holds the bundles of each size built so far, shared by every
// backend (each store gets them in order), so that each is encoded once.
var bundleCache struct {
	mu  sync.Mutex
	pad map[int]string
	cs  map[int][]*bundle.Canonical
}

// benchBundles returns n distinct bundles whose blobs are about size bytes:
// storetest.NewBundle(i) (so the hashes differ) with inputs padded by size
// characters of base64 text of random bytes, which zstd does not shrink.
func benchBundles(b *testing.B, size, n int) []*bundle.Canonical {
	b.Helper()
	bc := &bundleCache
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.cs == nil {
		bc.pad, bc.cs = map[int]string{}, map[int][]*bundle.Canonical{}
	}
	if _, ok := bc.pad[size]; !ok {
		raw := make([]byte, size*3/4)
		rand.Read(raw)
		bc.pad[size] = base64.RawURLEncoding.EncodeToString(raw)
	}
	for i := len(bc.cs[size]); i < n; i++ {
		v := storetest.NewBundle(i)
		v.Manifest.Inputs = []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, bc.pad[size]))
		c, err := bundle.Encode(v)
		if err != nil {
			b.Fatalf("Encode: %v", err)
		}
		bc.cs[size] = append(bc.cs[size], c)
	}
	return bc.cs[size][:n]
}

// benchPostgresURL creates a migrated database of its own, dropped when b
// ends (after the store on it is closed), and returns its URL.
func benchPostgresURL(b *testing.B) string {
	dsn := testenv.FreshPostgresDatabase(b)
	ctx := benchCtx(b)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgstore.Migrate(ctx, pool); err != nil {
		b.Fatalf("migrate: %v", err)
	}
	return dsn
}

// benchS3URL creates a bucket of its own on the test gateway, emptied and
// deleted when b ends, and returns the URL of a store in it.
func benchS3URL(b *testing.B) string {
	return testenv.FreshS3Bucket(b, "pyrula-resolve-bench").StoreURL("bench")
}
