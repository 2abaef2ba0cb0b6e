package storetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
)

// waitLimit bounds how long a test waits for an operation that must return
// promptly; reaching it is a failure, never a pass.
const waitLimit = 30 * time.Second

// save saves c with store.Save and returns created.
func (f fixture) save(t *testing.T, c *bundle.Canonical) bool {
	t.Helper()
	created, err := store.Save(f.ctx, f.s, c)
	if err != nil {
		t.Fatalf("Save %s: %v", c.Hash().Short(), err)
	}
	return created
}

// put puts blob under hash and returns created.
func (f fixture) put(t *testing.T, hash bundle.Hash, blob []byte) bool {
	t.Helper()
	created, err := f.s.Put(f.ctx, hash, bytes.NewReader(blob))
	if err != nil {
		t.Fatalf("Put %s: %v", hash.Short(), err)
	}
	return created
}

// get reads a bundle with store.Get to the end and closes it. It returns the
// first error of Get, Read and Close.
func (f fixture) get(hash bundle.Hash) ([]byte, error) {
	rc, err := store.Get(f.ctx, f.s, hash)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return b, err
}

// mustGet reads a bundle and checks that it is c's canonical bytes.
func (f fixture) mustGet(t *testing.T, c *bundle.Canonical) {
	t.Helper()
	got, err := f.get(c.Hash())
	if err != nil {
		t.Fatalf("Get %s: %v", c.Hash().Short(), err)
	}
	if want := canonicalBytes(t, c); !bytes.Equal(got, want) {
		t.Fatalf("Get %s: got %d bytes, want the %d canonical bytes", c.Hash().Short(), len(got), len(want))
	}
	if h := bundle.HashBytes(got); h != c.Hash() {
		t.Fatalf("Get %s: bytes hash to %s", c.Hash().Short(), h)
	}
}

// stat returns Info, failing the test on any error.
func (f fixture) stat(t *testing.T, hash bundle.Hash) store.Info {
	t.Helper()
	info, err := f.s.Stat(f.ctx, hash)
	if err != nil {
		t.Fatalf("Stat %s: %v", hash.Short(), err)
	}
	return info
}

// wantNamed checks that a not-found error says which operation looked for
// which bundle: its text holds op and the hash's short form.
func wantNamed(t *testing.T, err error, op string, hash bundle.Hash) {
	t.Helper()
	if msg := err.Error(); !strings.Contains(msg, op+" ") || !strings.Contains(msg, hash.Short()) {
		t.Errorf("%s %s: %q does not name the operation and the bundle", op, hash.Short(), msg)
	}
}

// wantAbsent checks that hash is not stored: Stat and Open say ErrNotFound,
// Get says bundle_missing.
func (f fixture) wantAbsent(t *testing.T, hash bundle.Hash) {
	t.Helper()
	if _, err := f.s.Stat(f.ctx, hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat %s: got %v, want ErrNotFound", hash.Short(), err)
	} else {
		wantNamed(t, err, "stat", hash)
	}
	if rc, err := f.s.Open(f.ctx, hash); !errors.Is(err, store.ErrNotFound) {
		if err == nil {
			rc.Close()
		}
		t.Errorf("Open %s: got %v, want ErrNotFound", hash.Short(), err)
	} else {
		wantNamed(t, err, "open", hash)
	}
	_, err := f.get(hash)
	wantCode(t, err, messages.BundleMissing)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get %s: %v does not wrap ErrNotFound", hash.Short(), err)
	}
}

// list returns what List yields, failing on an error or a hash listed twice.
func (f fixture) list(t *testing.T) map[bundle.Hash]store.Info {
	t.Helper()
	got := map[bundle.Hash]store.Info{}
	for info, err := range f.s.List(f.ctx) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if _, dup := got[info.Hash]; dup {
			t.Fatalf("List yielded %s twice", info.Hash.Short())
		}
		got[info.Hash] = info
	}
	return got
}

// wantListed checks that List yields exactly the given hashes.
func (f fixture) wantListed(t *testing.T, want ...bundle.Hash) map[bundle.Hash]store.Info {
	t.Helper()
	got := f.list(t)
	wantSet := map[bundle.Hash]bool{}
	for _, h := range want {
		wantSet[h] = true
		if _, ok := got[h]; !ok {
			t.Errorf("List misses %s", h.Short())
		}
	}
	for h := range got {
		if !wantSet[h] {
			t.Errorf("List yields %s, which is not stored", h.Short())
		}
	}
	return got
}

// wantCode checks that err carries code.
func wantCode(t *testing.T, err error, code messages.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if got, ok := messages.CodeOf(err); !ok || got != code {
		t.Fatalf("got error %v (code %q), want code %s", err, got, code)
	}
}

// bundles returns n different canonical bundles.
func bundles(t *testing.T, n int) []*bundle.Canonical {
	cs := make([]*bundle.Canonical, n)
	for i := range cs {
		cs[i] = Bundle(t, i)
	}
	return cs
}

func hashes(cs []*bundle.Canonical) []bundle.Hash {
	hs := make([]bundle.Hash, len(cs))
	for i, c := range cs {
		hs[i] = c.Hash()
	}
	return hs
}

func (s *suite) testPutGetRoundTrip(t *testing.T) {
	f := s.setup(t)
	for _, c := range bundles(t, 4) {
		before := s.cfg.now()
		if !f.save(t, c) {
			t.Errorf("Save %s of a new bundle: created=false", c.Hash().Short())
		}
		after := s.cfg.now()
		f.mustGet(t, c)

		// The backend keeps the blob verbatim.
		rc, err := f.s.Open(f.ctx, c.Hash())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		stored, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read blob: %v", err)
		}
		blob := blobBytes(t, c)
		if !bytes.Equal(stored, blob) {
			t.Errorf("Open %s: stored blob differs from the blob saved", c.Hash().Short())
		}
		// And Read gives the same bundle back.
		back, err := bundle.Read(bytes.NewReader(stored), bundle.Options{})
		if err != nil {
			t.Errorf("bundle.Read of the stored blob: %v", err)
		} else if back.Hash() != c.Hash() {
			t.Errorf("bundle.Read of the stored blob: hash %s, want %s", back.Hash().Short(), c.Hash().Short())
		}

		info := f.stat(t, c.Hash())
		if info.Hash != c.Hash() || info.Size != int64(len(blob)) {
			t.Errorf("Stat = %+v, want hash %s size %d", info, c.Hash().Short(), len(blob))
		}
		if s.cfg.clock != nil && (info.UpdatedAt.Before(before) || info.UpdatedAt.After(after)) {
			t.Errorf("UpdatedAt %v is not between %v and %v (the injected clock around Put)", info.UpdatedAt, before, after)
		}
		if info.UpdatedAt.IsZero() {
			t.Errorf("UpdatedAt is zero")
		}
	}
}

func (s *suite) testPutTwice(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 1)
	if !f.save(t, c) {
		t.Fatal("first Save: created=false")
	}
	first := f.stat(t, c.Hash())
	if f.save(t, c) {
		t.Fatal("second Save: created=true, want false")
	}
	second := f.stat(t, c.Hash())
	if second.UpdatedAt.Before(first.UpdatedAt) {
		t.Errorf("re-save moved UpdatedAt back: %v then %v", first.UpdatedAt, second.UpdatedAt)
	}
	if s.cfg.clock != nil && !second.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("re-save did not refresh UpdatedAt: %v then %v", first.UpdatedAt, second.UpdatedAt)
	}
	listed := f.wantListed(t, c.Hash())
	if listed[c.Hash()].Size != first.Size {
		t.Errorf("List size %d, Stat size %d", listed[c.Hash()].Size, first.Size)
	}
	f.mustGet(t, c)
}

// concurrently runs fn(i) for i in [0, n) in n goroutines released at once.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

func (s *suite) testConcurrentPutSame(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 3)
	blob := blobBytes(t, c)
	const n = 32
	created := make([]bool, n)
	errs := make([]error, n)
	concurrently(n, func(i int) {
		created[i], errs[i] = f.s.Put(f.ctx, c.Hash(), bytes.NewReader(blob))
	})
	count := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Put #%d: %v", i, errs[i])
		}
		if created[i] {
			count++
		}
	}
	if count == 0 {
		t.Errorf("no Put reported created=true")
	}
	f.wantListed(t, c.Hash())
	f.mustGet(t, c)
	if info := f.stat(t, c.Hash()); info.Size != int64(len(blob)) {
		t.Errorf("stored size %d, want %d", info.Size, len(blob))
	}
}

func (s *suite) testConcurrentPutDistinct(t *testing.T) {
	f := s.setup(t)
	cs := bundles(t, 4)
	blobs := make([][]byte, len(cs))
	for i, c := range cs {
		blobs[i] = blobBytes(t, c)
	}
	const n = 32
	errs := make([]error, n)
	concurrently(n, func(i int) {
		c := cs[i%len(cs)]
		_, errs[i] = f.s.Put(f.ctx, c.Hash(), bytes.NewReader(blobs[i%len(cs)]))
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put #%d: %v", i, err)
		}
	}
	f.wantListed(t, hashes(cs)...)
	for _, c := range cs {
		f.mustGet(t, c)
	}
}

// failingReader yields data, then fails with err.
type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

var errBoom = errors.New("storetest: reader failed")

func (s *suite) testFailedPut(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 3)
	blob := blobBytes(t, c)
	created, err := f.s.Put(f.ctx, c.Hash(), &failingReader{data: blob[:len(blob)/2], err: errBoom})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Put with a failing reader: created=%v err=%v, want an error wrapping the reader's", created, err)
	}
	f.wantAbsent(t, c.Hash())
	f.wantListed(t)
	if !f.put(t, c.Hash(), blob) {
		t.Errorf("Put after a failed Put: created=false")
	}
	f.mustGet(t, c)
}

func (s *suite) testAbsent(t *testing.T) {
	f := s.setup(t)
	stored, absent := Bundle(t, 0), Bundle(t, 1)
	f.save(t, stored)
	f.wantAbsent(t, absent.Hash())
	if deleted, err := f.s.Delete(f.ctx, absent.Hash()); err != nil || deleted {
		t.Errorf("Delete of an absent hash: deleted=%v err=%v, want false, nil", deleted, err)
	}
	if deleted, err := f.s.DeleteBefore(f.ctx, absent.Hash(), s.cfg.now().Add(time.Hour)); err != nil || deleted {
		t.Errorf("DeleteBefore of an absent hash: deleted=%v err=%v, want false, nil", deleted, err)
	}
	f.wantListed(t, stored.Hash())
}

func (s *suite) testInvalidHash(t *testing.T) {
	f := s.setup(t)
	good := Bundle(t, 0)
	blob := blobBytes(t, good)
	bad := []bundle.Hash{
		"",
		"abc",
		bundle.Hash(strings.ToUpper(string(good.Hash()))),
		good.Hash()[:63],
		good.Hash() + "0",
		"../../../../../../../../../../../../../../../../../../../etc/passwd",
		bundle.Hash(strings.Repeat("g", 64)),
		bundle.Hash("/" + string(good.Hash()[1:])),
	}
	for _, h := range bad {
		_, err := f.s.Put(f.ctx, h, bytes.NewReader(blob))
		wantCode(t, err, messages.InvalidFixtureHash)
		_, err = f.s.Open(f.ctx, h)
		wantCode(t, err, messages.InvalidFixtureHash)
		_, err = f.s.Stat(f.ctx, h)
		wantCode(t, err, messages.InvalidFixtureHash)
		_, err = f.s.Delete(f.ctx, h)
		wantCode(t, err, messages.InvalidFixtureHash)
		_, err = f.s.DeleteBefore(f.ctx, h, s.cfg.now().Add(time.Hour))
		wantCode(t, err, messages.InvalidFixtureHash)
		_, err = store.Get(f.ctx, f.s, h)
		wantCode(t, err, messages.InvalidFixtureHash)
	}
	f.wantListed(t)
}

func (s *suite) testDeleteThenGet(t *testing.T) {
	f := s.setup(t)
	c, other := Bundle(t, 0), Bundle(t, 1)
	f.save(t, c)
	f.save(t, other)
	deleted, err := f.s.Delete(f.ctx, c.Hash())
	if err != nil || !deleted {
		t.Fatalf("Delete: deleted=%v err=%v, want true, nil", deleted, err)
	}
	f.wantAbsent(t, c.Hash())
	f.wantListed(t, other.Hash())
	f.mustGet(t, other)
	if deleted, err := f.s.Delete(f.ctx, c.Hash()); err != nil || deleted {
		t.Errorf("second Delete: deleted=%v err=%v, want false, nil", deleted, err)
	}
	if !f.save(t, c) {
		t.Errorf("Save after Delete: created=false")
	}
	f.mustGet(t, c)
}

func (s *suite) testDeleteBefore(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 2)
	f.save(t, c)
	info := f.stat(t, c.Hash())
	for _, cutoff := range []time.Time{info.UpdatedAt, info.UpdatedAt.Add(-time.Hour)} {
		deleted, err := f.s.DeleteBefore(f.ctx, c.Hash(), cutoff)
		if err != nil || deleted {
			t.Fatalf("DeleteBefore(cutoff %v, updated %v): deleted=%v err=%v, want false, nil",
				cutoff, info.UpdatedAt, deleted, err)
		}
	}
	f.mustGet(t, c)
	deleted, err := f.s.DeleteBefore(f.ctx, c.Hash(), info.UpdatedAt.Add(time.Hour))
	if err != nil || !deleted {
		t.Fatalf("DeleteBefore(an hour after UpdatedAt): deleted=%v err=%v, want true, nil", deleted, err)
	}
	f.wantAbsent(t, c.Hash())
	f.wantListed(t)
}

func (s *suite) testList(t *testing.T) {
	f := s.setup(t)
	f.wantListed(t)
	cs := bundles(t, 6)
	for _, c := range cs {
		f.save(t, c)
	}
	if deleted, err := f.s.Delete(f.ctx, cs[2].Hash()); err != nil || !deleted {
		t.Fatalf("Delete: deleted=%v err=%v", deleted, err)
	}
	remaining := append(append([]*bundle.Canonical{}, cs[:2]...), cs[3:]...)
	listed := f.wantListed(t, hashes(remaining)...)
	for _, c := range remaining {
		info := listed[c.Hash()]
		if want := int64(len(blobBytes(t, c))); info.Size != want {
			t.Errorf("List %s: size %d, want %d", c.Hash().Short(), info.Size, want)
		}
		// Backends may report List's and Stat's times at different precisions.
		if st := f.stat(t, c.Hash()); st.UpdatedAt.Sub(info.UpdatedAt).Abs() >= time.Second {
			t.Errorf("List %s: UpdatedAt %v, Stat says %v", c.Hash().Short(), info.UpdatedAt, st.UpdatedAt)
		}
	}
	// Stopping early is allowed.
	for range f.s.List(f.ctx) {
		break
	}
}

func (s *suite) testCorrupt(t *testing.T) {
	if s.cfg.corrupt == nil {
		t.Skip("storetest: no WithCorrupt hook for this backend")
	}
	f := s.setup(t)
	c, other := Bundle(t, 3), Bundle(t, 4)
	f.save(t, c)
	f.save(t, other)
	s.cfg.corrupt(t, f.s, c.Hash())
	_, err := f.get(c.Hash())
	wantCode(t, err, messages.BundleCorrupt)
	f.mustGet(t, other)
	// A stored copy is never replaced by a save; delete, then save again.
	if f.save(t, c) {
		t.Errorf("Save over a corrupt copy: created=true, want false (put-if-absent)")
	}
	_, err = f.get(c.Hash())
	wantCode(t, err, messages.BundleCorrupt)
	if deleted, err := f.s.Delete(f.ctx, c.Hash()); err != nil || !deleted {
		t.Fatalf("Delete: deleted=%v err=%v", deleted, err)
	}
	if !f.save(t, c) {
		t.Errorf("Save after Delete: created=false")
	}
	f.mustGet(t, c)
}

func (s *suite) testInterruptedWrite(t *testing.T) {
	if s.cfg.leaveTemp == nil {
		t.Skip("storetest: no WithLeaveTempFile hook for this backend")
	}
	f := s.setup(t)
	a, b := Bundle(t, 0), Bundle(t, 1)
	blobA, blobB := blobBytes(t, a), blobBytes(t, b)
	f.save(t, b)
	s.cfg.leaveTemp(t, f.s, a.Hash(), blobA[:len(blobA)/2])
	s.cfg.leaveTemp(t, f.s, a.Hash(), blobA) // complete, but never published
	s.cfg.leaveTemp(t, f.s, b.Hash(), blobB[:len(blobB)/3])

	f.wantListed(t, b.Hash())
	f.wantAbsent(t, a.Hash())
	f.mustGet(t, b)
	if deleted, err := f.s.Delete(f.ctx, a.Hash()); err != nil || deleted {
		t.Errorf("Delete of a hash with only leftovers: deleted=%v err=%v, want false, nil", deleted, err)
	}
	if !f.put(t, a.Hash(), blobA) {
		t.Errorf("Put beside a leftover: created=false")
	}
	f.mustGet(t, a)
	f.wantListed(t, a.Hash(), b.Hash())
}

// gcRun runs GC and returns the reported items by hash, failing on an error
// or a bundle reported twice.
func (f fixture) gcRun(t *testing.T, p store.GCParams, also func(store.GCItem)) map[bundle.Hash]store.GCItem {
	t.Helper()
	items := map[bundle.Hash]store.GCItem{}
	err := store.GC(f.ctx, f.s, p, func(it store.GCItem) error {
		if _, dup := items[it.Info.Hash]; dup {
			t.Errorf("GC reported %s twice", it.Info.Hash.Short())
		}
		items[it.Info.Hash] = it
		if also != nil {
			also(it)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	return items
}

func wantAction(t *testing.T, items map[bundle.Hash]store.GCItem, h bundle.Hash, action string) {
	t.Helper()
	it, ok := items[h]
	if !ok {
		t.Errorf("GC did not report %s (want %s)", h.Short(), action)
		return
	}
	if it.Action != action {
		t.Errorf("GC %s: action %q, want %q", h.Short(), it.Action, action)
	}
}

// startAfterPuts returns a GC clock whose start is after every UpdatedAt
// stamped so far, by a margin that no backend's timestamp granularity hides.
func (s *suite) startAfterPuts() func() time.Time {
	if s.cfg.clock != nil {
		s.cfg.clock.Advance(time.Hour)
		return s.cfg.clock.Now
	}
	return func() time.Time { return time.Now().Add(time.Hour) }
}

func (s *suite) testGCListOnly(t *testing.T) {
	f := s.setup(t)
	cs := bundles(t, 3)
	for _, c := range cs {
		f.save(t, c)
	}
	keep := map[bundle.Hash]bool{cs[0].Hash(): true, Bundle(t, 99).Hash(): true}
	items := f.gcRun(t, store.GCParams{Keep: keep, Now: s.startAfterPuts()}, nil)
	if len(items) != len(cs) {
		t.Errorf("GC reported %d bundles, want %d", len(items), len(cs))
	}
	wantAction(t, items, cs[0].Hash(), store.ActionKept)
	wantAction(t, items, cs[1].Hash(), store.ActionCandidate)
	wantAction(t, items, cs[2].Hash(), store.ActionCandidate)
	if it := items[cs[1].Hash()]; it.Info.Size != f.stat(t, cs[1].Hash()).Size {
		t.Errorf("GC item info %+v does not describe the bundle", it.Info)
	}
	f.wantListed(t, hashes(cs)...)
}

func (s *suite) testGCSweep(t *testing.T) {
	f := s.setup(t)
	cs := bundles(t, 4)
	for _, c := range cs {
		f.save(t, c)
	}
	keep := map[bundle.Hash]bool{cs[1].Hash(): true}
	items := f.gcRun(t, store.GCParams{Keep: keep, Sweep: true, Now: s.startAfterPuts()}, nil)
	wantAction(t, items, cs[1].Hash(), store.ActionKept)
	for _, c := range []*bundle.Canonical{cs[0], cs[2], cs[3]} {
		wantAction(t, items, c.Hash(), store.ActionDeleted)
		f.wantAbsent(t, c.Hash())
	}
	f.wantListed(t, cs[1].Hash())
	f.mustGet(t, cs[1])

	// Without a keep list every bundle is a candidate.
	items = f.gcRun(t, store.GCParams{Sweep: true, Now: s.startAfterPuts()}, nil)
	wantAction(t, items, cs[1].Hash(), store.ActionDeleted)
	f.wantListed(t)
}

func (s *suite) testGCSkipsNew(t *testing.T) {
	f := s.setup(t)
	// GC's start is before the saves; any timestamp granularity rounds the
	// saves' stamps down no further than the start of their second.
	start := s.cfg.now().Truncate(time.Second)
	cs := bundles(t, 3)
	for _, c := range cs {
		f.save(t, c)
	}
	for _, sweep := range []bool{false, true} {
		items := f.gcRun(t, store.GCParams{Sweep: sweep, Now: func() time.Time { return start }}, nil)
		for _, c := range cs {
			wantAction(t, items, c.Hash(), store.ActionSkippedNew)
		}
		f.wantListed(t, hashes(cs)...)
	}
}

func (s *suite) testGCResaved(t *testing.T) {
	f := s.setup(t)
	cs := bundles(t, 5)
	blobs := map[bundle.Hash][]byte{}
	for _, c := range cs {
		f.save(t, c)
		blobs[c.Hash()] = blobBytes(t, c)
	}
	now := time.Now
	if s.cfg.clock != nil {
		now = s.startAfterPuts()
	}
	// While GC reports the first bundle, save all the others again: they were
	// listed (or are about to be) as older than GC's start, but they are
	// saved after it, so GC must not sweep them.
	var first bundle.Hash
	items := f.gcRun(t, store.GCParams{Sweep: true, Now: now}, func(it store.GCItem) {
		if first != "" {
			return
		}
		first = it.Info.Hash
		for _, c := range cs {
			if c.Hash() != first && f.put(t, c.Hash(), blobs[c.Hash()]) {
				t.Errorf("re-save of %s during GC: created=true, want false", c.Hash().Short())
			}
		}
	})
	if first == "" {
		t.Fatal("GC reported nothing")
	}
	for _, c := range cs {
		if c.Hash() == first {
			continue
		}
		wantAction(t, items, c.Hash(), store.ActionSkippedNew)
		f.mustGet(t, c)
	}
	if s.cfg.clock != nil {
		wantAction(t, items, first, store.ActionDeleted)
		f.wantAbsent(t, first)
	}
}

func (s *suite) testGCReportError(t *testing.T) {
	f := s.setup(t)
	for _, c := range bundles(t, 3) {
		f.save(t, c)
	}
	calls := 0
	err := store.GC(f.ctx, f.s, store.GCParams{Now: s.startAfterPuts()}, func(store.GCItem) error {
		calls++
		return errBoom
	})
	if !errors.Is(err, errBoom) || calls != 1 {
		t.Errorf("GC with a failing report: err=%v after %d calls, want errBoom after 1", err, calls)
	}
}

func (s *suite) testGCEmpty(t *testing.T) {
	f := s.setup(t)
	items := f.gcRun(t, store.GCParams{Sweep: true}, nil)
	if len(items) != 0 {
		t.Errorf("GC of an empty store reported %d items", len(items))
	}
	if err := store.GC(f.ctx, f.s, store.GCParams{}, nil); err != nil {
		t.Errorf("GC with a nil report: %v", err)
	}
}

func wantCanceled(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("%s with a cancelled context: got %v, want an error wrapping context.Canceled", what, err)
	}
}

func (s *suite) testCancelled(t *testing.T) {
	f := s.setup(t)
	c, absent := Bundle(t, 0), Bundle(t, 1)
	f.save(t, c)
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()

	_, err := f.s.Put(ctx, absent.Hash(), bytes.NewReader(blobBytes(t, absent)))
	wantCanceled(t, "Put", err)
	_, err = f.s.Put(ctx, c.Hash(), bytes.NewReader(blobBytes(t, c)))
	wantCanceled(t, "Put of a stored bundle", err)
	_, err = store.Save(ctx, f.s, absent)
	wantCanceled(t, "Save", err)
	_, err = f.s.Open(ctx, c.Hash())
	wantCanceled(t, "Open", err)
	_, err = store.Get(ctx, f.s, c.Hash())
	wantCanceled(t, "Get", err)
	_, err = f.s.Stat(ctx, c.Hash())
	wantCanceled(t, "Stat", err)
	_, err = f.s.Delete(ctx, c.Hash())
	wantCanceled(t, "Delete", err)
	_, err = f.s.DeleteBefore(ctx, c.Hash(), s.cfg.now().Add(time.Hour))
	wantCanceled(t, "DeleteBefore", err)
	n := 0
	for _, err := range f.s.List(ctx) {
		n++
		wantCanceled(t, "List", err)
	}
	if n != 1 {
		t.Errorf("List with a cancelled context yielded %d times, want one error", n)
	}
	err = store.GC(ctx, f.s, store.GCParams{Sweep: true, Now: s.startAfterPuts()}, func(it store.GCItem) error {
		t.Errorf("GC with a cancelled context reported %+v", it)
		return nil
	})
	wantCanceled(t, "GC", err)

	// Nothing changed.
	f.wantListed(t, c.Hash())
	f.mustGet(t, c)

	// A Get whose context is cancelled while it is read stops with ctx's error.
	ctx, cancel = context.WithCancel(f.ctx)
	rc, err := store.Get(ctx, f.s, c.Hash())
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	cancel()
	_, err = io.ReadAll(rc)
	wantCanceled(t, "reading Get's reader", err)
}

// endlessReader yields bytes forever and cancels a context after a number
// of reads: a Put that does not watch its context never ends.
type endlessReader struct {
	reads, cancelAfter int
	cancel             context.CancelFunc
}

func (r *endlessReader) Read(p []byte) (int, error) {
	r.reads++
	if r.reads == r.cancelAfter {
		r.cancel()
	}
	return copy(p, endlessChunk[:]), nil
}

// endlessChunk is what each read of an endlessReader returns.
var endlessChunk [4096]byte

func (s *suite) testCancelDuringPut(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 0)
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.s.Put(ctx, c.Hash(), &endlessReader{cancelAfter: 16, cancel: cancel})
		done <- err
	}()
	select {
	case err := <-done:
		wantCanceled(t, "Put cancelled while it reads", err)
	case <-time.After(waitLimit):
		t.Fatalf("Put did not return within %v after its context was cancelled", waitLimit)
	}
	f.wantAbsent(t, c.Hash())
	f.wantListed(t)
}

func (s *suite) testCancelDuringGC(t *testing.T) {
	f := s.setup(t)
	cs := bundles(t, 5)
	for _, c := range cs {
		f.save(t, c)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	calls := 0
	err := store.GC(ctx, f.s, store.GCParams{Sweep: true, Now: s.startAfterPuts()}, func(store.GCItem) error {
		calls++
		cancel()
		return nil
	})
	wantCanceled(t, "GC cancelled in its first report", err)
	if calls != 1 {
		t.Errorf("GC reported %d bundles after its context was cancelled in the first report, want 1", calls)
	}
	if got := len(f.list(t)); got != len(cs)-1 {
		t.Errorf("after a GC cancelled in its first report, %d bundles remain, want %d", got, len(cs)-1)
	}
}

func (s *suite) testIdentity(t *testing.T) {
	f := s.setup(t)
	id := f.s.Identity()
	loc, err := store.ParseURL(id)
	if err != nil {
		t.Fatalf("Identity %q does not parse: %v", id, err)
	}
	if loc.Identity != id {
		t.Errorf("Identity %q is not normalised: ParseURL gives %q", id, loc.Identity)
	}
	for _, expected := range []string{"", "  ", id} {
		if err := store.CheckBinding(f.s, expected); err != nil {
			t.Errorf("CheckBinding(%q): %v", expected, err)
		}
	}
	other := "memory:"
	if id == "memory:" {
		other = "file:///nonexistent/other/store"
	}
	wantCode(t, store.CheckBinding(f.s, other), messages.BindingMismatch)
	wantCode(t, store.CheckBinding(f.s, "bogus-scheme://x"), messages.BindingMismatch)
}

func (s *suite) testClose(t *testing.T) {
	f := s.setup(t)
	c := Bundle(t, 0)
	f.save(t, c)
	id := f.s.Identity()
	if err := f.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := f.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if f.s.Identity() != id {
		t.Errorf("Identity changed after Close: %q, was %q", f.s.Identity(), id)
	}
	if _, err := f.s.Stat(f.ctx, c.Hash()); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Stat after Close: %v, want ErrClosed", err)
	}
	if _, err := f.s.Put(f.ctx, c.Hash(), bytes.NewReader(nil)); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}
	for _, err := range f.s.List(f.ctx) {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("List after Close: %v, want ErrClosed", err)
		}
	}
}
