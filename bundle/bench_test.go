package bundle_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/bundle/bundletest"
)

// The bundle benchmarks of docs/performance.md. Run them with
//
//	go test -run '^$' -bench . -benchtime 3x ./bundle/
//
// Each reports MB/s (of canonical bytes) and peak-x: the peak live heap
// above the baseline, as a multiple of the canonical bundle size.
// BenchmarkImportVsPython also runs Python's reference canonicaliser on the
// same file as the anchor of the 5× target (skipped without python3).

var benchSizes = []int{1 << 20, 16 << 20, 128 << 20}

// sizes are the bundle sizes a benchmark runs: only the smallest with
// -short (the smoke run of scripts/test).
func sizes() []int {
	if testing.Short() {
		return benchSizes[:1]
	}
	return benchSizes
}

// genBundle is bundletest.Generate with the bundle benchmarks' seed.
func genBundle(size int) []byte { return bundletest.Generate(size, 1) }

var (
	genOnce  sync.Map // size → []byte
	heapLive = "/memory/classes/heap/objects:bytes"
)

func benchInput(size int) []byte {
	if v, ok := genOnce.Load(size); ok {
		return v.([]byte)
	}
	b := genBundle(size)
	genOnce.Store(size, b)
	return b
}

// peakSampler records the peak live heap while it runs.
type peakSampler struct {
	base, peak atomic.Uint64
	stop       chan struct{}
	done       chan struct{}
}

func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapLive}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startPeak() *peakSampler {
	runtime.GC()
	p := &peakSampler{stop: make(chan struct{}), done: make(chan struct{})}
	p.base.Store(heapNow())
	go func() {
		defer close(p.done)
		t := time.NewTicker(500 * time.Microsecond)
		defer t.Stop()
		for {
			if h := heapNow(); h > p.peak.Load() {
				p.peak.Store(h)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// ratio stops the sampler and returns the peak above the baseline as a
// multiple of size.
func (p *peakSampler) ratio(size int64) float64 {
	close(p.stop)
	<-p.done
	if h := heapNow(); h > p.peak.Load() {
		p.peak.Store(h)
	}
	above := float64(p.peak.Load()) - float64(p.base.Load())
	return max(above, 0) / float64(size)
}

func sizeName(n int) string { return fmt.Sprintf("%dMiB", n>>20) }

// BenchmarkCanonicalizeHash: Read (detect, canonicalise, validate, sort,
// hash) of a plain-JSON bundle.
func BenchmarkCanonicalizeHash(b *testing.B) {
	for _, size := range sizes() {
		b.Run(sizeName(size), func(b *testing.B) {
			in := benchInput(size)
			c, err := bundle.Read(bytes.NewReader(in), bundle.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(c.Size())
			c = nil
			var worst float64
			b.ResetTimer()
			for range b.N {
				p := startPeak()
				c, err := bundle.Read(bytes.NewReader(in), bundle.Options{})
				if err != nil {
					b.Fatal(err)
				}
				worst = max(worst, p.ratio(c.Size()))
			}
			b.ReportMetric(worst, "peak-x")
		})
	}
}

// BenchmarkCompress: the zstd blob of a canonical bundle.
func BenchmarkCompress(b *testing.B) {
	for _, size := range sizes() {
		b.Run(sizeName(size), func(b *testing.B) {
			c, err := bundle.Read(bytes.NewReader(benchInput(size)), bundle.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(c.Size())
			var worst, ratio float64
			b.ResetTimer()
			for range b.N {
				p := startPeak()
				var n countWriter
				if err := c.WriteBlob(&n); err != nil {
					b.Fatal(err)
				}
				worst = max(worst, p.ratio(c.Size()))
				ratio = float64(c.Size()) / float64(n)
			}
			b.ReportMetric(worst, "peak-x")
			b.ReportMetric(ratio, "compression-ratio")
		})
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// BenchmarkVerifiedRead: decompress and hash a stored blob, beside two
// anchors of raw zstd decompression of the same blob (target: ≥ 70 %): a
// fresh single-goroutine decoder streamed into io.Discard, as a one-off
// read does it, and one decoder reused for every read decompressing into
// one reused buffer (DecodeAll), the least a read can cost.
func BenchmarkVerifiedRead(b *testing.B) {
	for _, size := range sizes() {
		c, err := bundle.Read(bytes.NewReader(benchInput(size)), bundle.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var blob bytes.Buffer
		if err := c.WriteBlob(&blob); err != nil {
			b.Fatal(err)
		}
		b.Run(sizeName(size)+"/verify", func(b *testing.B) {
			// The peak heap of one read, measured before the timed ones (the
			// sampler starts with a collection, which would be timed too).
			p := startPeak()
			if err := bundle.Verify(bytes.NewReader(blob.Bytes()), c.Hash()); err != nil {
				b.Fatal(err)
			}
			peak := p.ratio(c.Size())
			b.SetBytes(c.Size())
			b.ResetTimer()
			for range b.N {
				if err := bundle.Verify(bytes.NewReader(blob.Bytes()), c.Hash()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(peak, "peak-x")
		})
		b.Run(sizeName(size)+"/anchor-zstd-decompress", func(b *testing.B) {
			b.SetBytes(c.Size())
			for range b.N {
				d, _ := zstd.NewReader(bytes.NewReader(blob.Bytes()), zstd.WithDecoderConcurrency(1))
				if _, err := io.Copy(io.Discard, d); err != nil {
					b.Fatal(err)
				}
				d.Close()
			}
		})
		b.Run(sizeName(size)+"/anchor-zstd-reused", func(b *testing.B) {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			out := make([]byte, 0, c.Size())
			b.SetBytes(c.Size())
			for range b.N {
				if out, err = d.DecodeAll(blob.Bytes(), out[:0]); err != nil {
					b.Fatal(err)
				}
			}
			if int64(len(out)) != c.Size() {
				b.Fatalf("decompressed %d bytes, want %d", len(out), c.Size())
			}
		})
	}
}

// BenchmarkRefuseOverLimit: refusing a bundle over the canonical limit
// (bundle_too_large) beside accepting one at about the limit, both read as
// case import reads them (Compress), the input's length known (a file) or
// not (a pipe), in plain canonical JSON and in a zstd blob. The limit is
// four fifths of the bundle's size for the refusal; peak-x is the peak live
// heap as a multiple of that limit. Refusing costs no more than accepting
// (docs/bundle-format.md, Limits).
func BenchmarkRefuseOverLimit(b *testing.B) {
	for _, size := range sizes() {
		c, err := bundle.Read(bytes.NewReader(benchInput(size)), bundle.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var blob bytes.Buffer
		if err := c.WriteBlob(&blob); err != nil {
			b.Fatal(err)
		}
		limit := c.Size() * 4 / 5
		for _, form := range []struct {
			name string
			in   []byte
		}{{"canonical", c.Bytes()}, {"zstd", blob.Bytes()}} {
			for _, pipe := range []bool{false, true} {
				for _, refuse := range []bool{false, true} {
					name := sizeName(size) + "/" + form.name
					if pipe {
						name += "/pipe"
					}
					opts := bundle.Options{Compress: true, MaxCanonicalSize: c.Size()}
					if refuse {
						name += "/refuse"
						opts.MaxCanonicalSize = limit
					} else {
						name += "/accept"
					}
					b.Run(name, func(b *testing.B) {
						var worst float64
						for range b.N {
							var r io.Reader = bytes.NewReader(form.in)
							if pipe {
								r = struct{ io.Reader }{r}
							}
							p := startPeak()
							_, err := bundle.Read(r, opts)
							if refuse != (err != nil) {
								b.Fatalf("refuse %v: %v", refuse, err)
							}
							worst = max(worst, p.ratio(limit))
						}
						b.ReportMetric(worst, "peak-x")
					})
				}
			}
		}
	}
}

// pythonReference is the anchor of docs/performance.md: json.loads, sort results,
// canonical json.dumps, sha256. It prints the hash and its peak RSS.
const pythonReference = `
import hashlib, json, resource, sys
with open(sys.argv[1], "rb") as f:
    obj = json.loads(f.read())
obj["results"].sort(key=lambda r: (r["kind"], r["key"]))
b = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
print(hashlib.sha256(b).hexdigest(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(b))
`

// BenchmarkImportVsPython: the whole import of a ~190 MB bundle (read,
// canonicalise, hash, compress, fsynced write to a file) beside Python's
// reference on the same file. Target: ≥ 5× Python, peak ≤ 2.5× the size.
// "export-form" is the readable `export --json` form (keys and results in
// canonical order, as this project and Python tooling write them: hashing
// and compression run beside canonicalisation); "unsorted" has keys and
// results out of order (they run after it).
func BenchmarkImportVsPython(b *testing.B) {
	size := 190 << 20
	if testing.Short() {
		size = 4 << 20
	}
	dir := b.TempDir()
	unsorted := genBundle(size)
	c, err := bundle.Read(bytes.NewReader(unsorted), bundle.Options{})
	if err != nil {
		b.Fatal(err)
	}
	canon, hash := c.Size(), c.Hash()
	files := map[string]string{"unsorted": filepath.Join(dir, "unsorted.json"), "export-form": filepath.Join(dir, "export.json")}
	if err := os.WriteFile(files["unsorted"], unsorted, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(files["export-form"])
	if err != nil {
		b.Fatal(err)
	}
	if err := c.WriteIndented(f); err != nil {
		b.Fatal(err)
	}
	f.Close()
	unsorted, c = nil, nil
	for _, form := range []string{"export-form", "unsorted"} {
		b.Run("go/"+form, func(b *testing.B) {
			b.SetBytes(canon)
			var worst float64
			for range b.N {
				p := startPeak()
				in, err := os.Open(files[form])
				if err != nil {
					b.Fatal(err)
				}
				c, err := bundle.Read(in, bundle.Options{Compress: true})
				in.Close()
				if err != nil {
					b.Fatal(err)
				}
				if c.Hash() != hash {
					b.Fatalf("hash %s, want %s", c.Hash(), hash)
				}
				out, err := os.Create(filepath.Join(dir, "out.case"))
				if err != nil {
					b.Fatal(err)
				}
				if err := c.WriteBlob(out); err != nil {
					b.Fatal(err)
				}
				if err := out.Sync(); err != nil {
					b.Fatal(err)
				}
				out.Close()
				worst = max(worst, p.ratio(c.Size()))
			}
			b.ReportMetric(worst, "peak-x")
		})
	}
	b.Run("anchor-python/export-form", func(b *testing.B) {
		py, err := exec.LookPath("python3")
		if err != nil {
			b.Skip("python3 not found")
		}
		b.SetBytes(canon)
		var rss float64
		for range b.N {
			out, err := exec.Command(py, "-c", pythonReference, files["export-form"]).Output()
			if err != nil {
				b.Fatal(err)
			}
			f := strings.Fields(string(out))
			if len(f) != 3 || f[0] != string(hash) {
				b.Fatalf("python hash %q, go hash %s", out, hash)
			}
			r, _ := strconv.ParseFloat(f[1], 64)
			rss = r / float64(canon)
		}
		b.ReportMetric(rss, "peak-rss-x")
	})
}

// TestGenBundleIsValid keeps the benchmark generator honest: what it makes
// is a valid bundle whose hash is the SHA-256 of its canonical bytes.
func TestGenBundleIsValid(t *testing.T) {
	c, err := bundle.Read(bytes.NewReader(genBundle(64<<10)), bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.Bytes())
	if bundle.Hash(fmt.Sprintf("%x", sum)) != c.Hash() {
		t.Fatal("hash is not the SHA-256 of the canonical bytes")
	}
}
