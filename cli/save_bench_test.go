package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/journal/valkeyjournal"
	"github.com/pyrula/caseworker/runevent"
)

// recordBigRun writes a finished run of the checkout target to namespace
// ns of the Valkey journal at client c, of about size bytes of results: one
// step call after another, each with its call:start (input), call:done and
// recorded result of varied JSON (as bundletest.Generate's), appended 1,000
// calls at a time. It returns the run's id.
func recordBigRun(tb testing.TB, j journal.Journal, size int) string {
	tb.Helper()
	ctx := context.Background()
	runID := "big_" + strconv.Itoa(size)
	lease, err := j.Create(ctx, journal.CreateParams{RunID: runID, TargetName: "checkout", CodeVersion: "examples/v1", Inputs: json.RawMessage(`{"sku":"SKU-42","qty":2}`), Owner: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, uint64(size)))
	fp := strings.Repeat("ab", 32)
	var batch journal.Batch
	written := 0
	for i := 0; written < size; i++ {
		key := fmt.Sprintf("fetch_%d:%d", rng.IntN(1000), i)
		call := json.RawMessage(fmt.Sprintf(`{"kind":"step","key":%q,"fingerprint":%q,"effect":"read"}`, key, fp))
		input := json.RawMessage(fmt.Sprintf(`{"id":%d,"query":"order %d \u00e9","page":%d}`, i, rng.IntN(1e6), i%7))
		result := fmt.Sprintf(`{"id":%d,"score":%s,"big":%d%d,"name":"Grüße \"%d\"\n","tags":["a","b\u00e9","c"],"nested":{"z":%t,"a":null,"m":[%s,%s]},"text":"%s"}`,
			i, strconv.FormatFloat(rng.Float64()*1e6, 'g', -1, 64), rng.Uint64(), rng.Uint64(), i, i%2 == 0,
			strconv.FormatFloat(rng.NormFloat64(), 'g', -1, 64), strconv.FormatFloat(rng.ExpFloat64()*1e-7, 'g', -1, 64),
			strings.Repeat("lorem ipsum dolor sit amet ", 1+rng.IntN(12)))
		start, err := runevent.FromMembers(runevent.CallStart, map[string]json.RawMessage{"call": call, "input": input})
		if err != nil {
			tb.Fatal(err)
		}
		done, err := runevent.FromMembers(runevent.CallDone, map[string]json.RawMessage{"call": call})
		if err != nil {
			tb.Fatal(err)
		}
		batch.Events = append(batch.Events, start, done)
		batch.Results = append(batch.Results, bundle.Result{Kind: "step", Key: key, Fingerprint: fp, Result: json.RawMessage(result)})
		written += len(result) + len(input) + 2*len(call)
		if len(batch.Results) == 1000 {
			if _, err := j.Append(ctx, lease, batch); err != nil {
				tb.Fatal(err)
			}
			batch = journal.Batch{}
		}
	}
	end, err := runevent.FromMembers(runevent.RunComplete, map[string]json.RawMessage{"output": json.RawMessage(`{"ok":true}`)})
	if err != nil {
		tb.Fatal(err)
	}
	batch.Events = append(batch.Events, end)
	if _, err := j.Finish(ctx, lease, batch); err != nil {
		tb.Fatal(err)
	}
	return runID
}

// BenchmarkSavePeak: `pyrula case save checkout RUN --fork-after-seq 1` (the
// built binary, into a file store) of a finished run in Valkey whose bundle
// is about 190 MB canonical (-short: 3 MB, the smoke run of scripts/test):
// every call after the fork, so that every result carries its input. It
// reports the process's peak RSS as a multiple of the saved bundle's
// canonical size (rss-x, target ≤ 1.0), the canonical size and the load
// average: spilled (TMPDIR a directory on disk), in memory (TMPDIR a
// tmpfs, which the spill refuses), and spilled from the PostgreSQL archive
// (the run sealed there and gone from Valkey).
//
//	go test -run '^$' -bench SavePeak -benchtime 2x -timeout 30m ./cli/
func BenchmarkSavePeak(b *testing.B) {
	size := 218 << 20 // about 190 MB canonical
	if testing.Short() {
		size = 3 << 20
	}
	url := testenv.ValkeyURL(b)
	ns := testenv.UniqueName(b, "savepeak")
	c := testenv.ValkeyClientAt(b, url, ns)
	j, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	runID := recordBigRun(b, j, size)
	hashes := map[string]string{}
	for _, tc := range []struct{ name, tmp string }{
		{"spilled", b.TempDir()},
		{"in-memory", "/dev/shm"}, // a tmpfs: the spill refuses it
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := os.Stat(tc.tmp); err != nil {
				b.Skipf("no %s: %v", tc.tmp, err)
			}
			hashes[tc.name] = savePeak(b, runID, tc.tmp, "PYRULA_VALKEY_URL="+url, "PYRULA_NAMESPACE="+ns)
		})
	}
	// The same run, archived in PostgreSQL and gone from Valkey (so
	// last): the save reads it from the archive.
	dsn := testenv.FreshPostgresDatabase(b)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgarchive.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	aj, err := valkeyjournal.New(c, valkeyjournal.Options{Namespace: ns, Archive: pgarchive.New(pool)})
	if err != nil {
		b.Fatal(err)
	}
	if err := aj.Seal(ctx, runID); err != nil {
		b.Fatal(err)
	}
	mk, ek, rk := valkeyjournal.Keys(ns, runID)
	if err := c.Do(ctx, c.B().Del().Key(mk, ek, rk).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	b.Run("archived", func(b *testing.B) {
		hashes["archived"] = savePeak(b, runID, b.TempDir(), "PYRULA_VALKEY_URL="+url, "PYRULA_NAMESPACE="+ns, "PYRULA_POSTGRES_DSN="+dsn)
	})
	// The same run saves to the same bundle, however it is read and held.
	for name, h := range hashes {
		if want, ok := hashes["spilled"]; ok && h != want {
			b.Errorf("%s: fixture hash %s, spilled %s", name, h, want)
		}
	}
}

// savePeak is one sub-benchmark of BenchmarkSavePeak: saves of run runID
// with TMPDIR=tmp and env. It returns the fixture hash saved.
func savePeak(b *testing.B, runID, tmp string, env ...string) string {
	dir := b.TempDir()
	var rss, canon int64
	var load float64
	var hash string
	for i := range b.N {
		load += loadAverage()
		store := filepath.Join(dir, fmt.Sprintf("cases-%d", i))
		cmd := exec.Command(pyrula, "case", "save", "checkout", runID, "--fork-after-seq", "1")
		cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + tmp, "PYRULA_FIXTURE_STORE=" + store}, env...), testenv.BinaryEnv()...)
		r := runChild(b, cmd)
		var out struct {
			FixtureHash string `json:"fixture_hash"`
		}
		if err := json.Unmarshal(r.out, &out); err != nil || out.FixtureHash == "" {
			b.Fatalf("pyrula printed %q (%v)", r.out, err)
		}
		b.StopTimer()
		hash = out.FixtureHash
		canon = canonicalSize(b, filepath.Join(store, out.FixtureHash[:2], out.FixtureHash+".case"))
		os.RemoveAll(store)
		b.StartTimer()
		rss = max(rss, r.peakRSS)
	}
	b.StopTimer()
	b.ReportMetric(float64(rss)/float64(canon), "rss-x")
	b.ReportMetric(float64(canon)/1e6, "canonical-MB")
	b.ReportMetric(load/float64(b.N), "load1")
	return hash
}

// canonicalSize is the canonical size of the bundle in blob file path.
func canonicalSize(tb testing.TB, path string) int64 {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := bundle.Read(bytes.NewReader(raw), bundle.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return c.Size()
}
