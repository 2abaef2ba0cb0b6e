package worker

import (
	"context"
	"errors"
	"io"
	"iter"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// The op label values of the store metrics, one per store.Store method
// that does I/O (Close is not measured).
const (
	opPut          = "put"
	opOpen         = "open"
	opStat         = "stat"
	opList         = "list"
	opDelete       = "delete"
	opDeleteBefore = "delete_before"
)

// meteredStore is a store.Store that measures the store it embeds:
// pyrula_worker_store_operation_duration_seconds and
// pyrula_worker_store_errors_total by backend and op, and
// pyrula_worker_bundle_bytes of the blobs it writes and reads.
type meteredStore struct {
	store.Store
	put, open, stat, list, del, delBefore storeOp
	putBytes, openBytes                   prometheus.Observer
}

var _ store.Store = (*meteredStore)(nil)

// Local implements store.Local for the store it measures.
func (s *meteredStore) Local() bool { return store.IsLocal(s.Store) }

// storeOp is the duration histogram and error counter of one operation.
type storeOp struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

// done observes an operation that started at start and ended with err.
func (o storeOp) done(start time.Time, err error) {
	o.duration.Observe(time.Since(start).Seconds())
	o.failed(err)
}

// failed counts err when it is a failure of the store: not an absent
// bundle, nor a call its caller cancelled.
func (o storeOp) failed(err error) {
	if err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, context.Canceled) {
		return
	}
	o.errors.Inc()
}

// newMeteredStore wraps s; the backend label is the scheme of its identity.
func newMeteredStore(s store.Store, m *metrics) *meteredStore {
	backend := storeBackend(s.Identity())
	op := func(name string) storeOp {
		return storeOp{
			duration: m.storeDuration.WithLabelValues(backend, name),
			errors:   m.storeErrors.WithLabelValues(backend, name),
		}
	}
	return &meteredStore{
		Store: s,
		put:   op(opPut), open: op(opOpen), stat: op(opStat), list: op(opList),
		del: op(opDelete), delBefore: op(opDeleteBefore),
		putBytes:  m.bundleBytes.WithLabelValues(opPut),
		openBytes: m.bundleBytes.WithLabelValues(opOpen),
	}
}

// storeBackend is the URL scheme of a store identity ("memory:",
// "file:///srv/cases", "postgres://…", "s3://…"), bounded to the schemes
// store.ParseURL knows ("other" for a store of another kind).
func storeBackend(identity string) string {
	scheme, _, _ := strings.Cut(identity, ":")
	switch scheme = strings.ToLower(scheme); scheme {
	case store.SchemeMemory, store.SchemeFile, store.SchemePostgres, store.SchemeS3:
		return scheme
	case "postgresql":
		return store.SchemePostgres
	}
	return "other"
}

// Put implements store.Store; a bundle it wrote is observed in
// pyrula_worker_bundle_bytes{op="put"} with the bytes read from blob.
func (s *meteredStore) Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (bool, error) {
	start := time.Now()
	cr := &countingReader{r: blob}
	created, err := s.Store.Put(ctx, hash, cr)
	s.put.done(start, err)
	if err == nil && created {
		s.putBytes.Observe(float64(cr.n))
	}
	return created, err
}

// Open implements store.Store. Its duration is the time to open the blob;
// a failure reading the blob counts as an open error, and a blob read to
// its end is observed in pyrula_worker_bundle_bytes{op="open"}.
func (s *meteredStore) Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := s.Store.Open(ctx, hash)
	s.open.done(start, err)
	if err != nil {
		return nil, err
	}
	return &meteredBlob{rc: rc, s: s}, nil
}

// Stat implements store.Store.
func (s *meteredStore) Stat(ctx context.Context, hash bundle.Hash) (store.Info, error) {
	start := time.Now()
	info, err := s.Store.Stat(ctx, hash)
	s.stat.done(start, err)
	return info, err
}

// List implements store.Store; its duration is that of the whole listing
// (until it ends or the caller stops), including the caller's time between
// two yields.
func (s *meteredStore) List(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		start := time.Now()
		var failed error
		defer func() { s.list.done(start, failed) }()
		for info, err := range s.Store.List(ctx) {
			if err != nil {
				failed = err
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// Delete implements store.Store.
func (s *meteredStore) Delete(ctx context.Context, hash bundle.Hash) (bool, error) {
	start := time.Now()
	deleted, err := s.Store.Delete(ctx, hash)
	s.del.done(start, err)
	return deleted, err
}

// DeleteBefore implements store.Store.
func (s *meteredStore) DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (bool, error) {
	start := time.Now()
	deleted, err := s.Store.DeleteBefore(ctx, hash, cutoff)
	s.delBefore.done(start, err)
	return deleted, err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// meteredBlob is a blob returned by meteredStore.Open.
type meteredBlob struct {
	rc      io.ReadCloser
	s       *meteredStore
	n       int64
	eof     bool
	counted bool // a read error was counted
}

func (b *meteredBlob) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil && !b.counted:
		b.counted = true
		b.s.open.failed(err)
	}
	return n, err
}

// Close closes the blob, observing its size when it was read to the end.
func (b *meteredBlob) Close() error {
	if b.eof {
		b.s.openBytes.Observe(float64(b.n))
		b.eof = false // observed once, even if closed twice
	}
	return b.rc.Close()
}

// instrument wraps the worker's fixture store in a meteredStore and points
// the stream metrics at its streams. Start calls it once everything is
// open, before the loops start.
func (w *Worker) instrument() {
	if w.store != nil {
		w.store = newMeteredStore(w.store, w.metrics)
	}
	w.attachStreamStats()
}
