package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle/bundletest"
	"github.com/pyrula/caseworker/internal/testenv"
)

// pythonImportReference is the anchor of the import target in
// docs/performance.md: json.loads, results sorted, canonical json.dumps,
// SHA-256. It prints the hash and the canonical size.
const pythonImportReference = `
import hashlib, json, sys
with open(sys.argv[1], "rb") as f:
    obj = json.loads(f.read())
obj["results"].sort(key=lambda r: (r["kind"], r["key"]))
b = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
print(hashlib.sha256(b).hexdigest(), len(b))
`

// genIndentedBundle writes an indented bundle of about size bytes with
// results (and keys) out of canonical order: a workflow run whose results
// hold varied JSON (non-ASCII and escaped strings, floats, big integers,
// nested objects), each with the call:done event of a real capture.
func genIndentedBundle(tb testing.TB, size int) []byte {
	compact := bundletest.Generate(size*2/3, 7) // indentation adds about half
	var out bytes.Buffer
	out.Grow(size + size/8)
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		tb.Fatal(err)
	}
	return out.Bytes()
}

// childRun is one finished child process: wall time and peak resident
// set (the kernel's maxrss: the whole process, not only the Go heap).
type childRun struct {
	out     []byte
	wall    time.Duration
	peakRSS int64 // bytes
}

// runChild runs cmd under GNU time, which reports its peak RSS: a direct
// child of this process would report at least this process's own RSS
// (Linux keeps the larger of the maxrss before and after exec, and Go
// starts children sharing its memory).
func runChild(tb testing.TB, cmd *exec.Cmd) childRun {
	tb.Helper()
	timeBin, err := exec.LookPath("time")
	if _, serr := os.Stat("/usr/bin/time"); serr == nil {
		timeBin, err = "/usr/bin/time", nil
	}
	if err != nil {
		tb.Skip("GNU time not found (it measures the peak RSS)")
	}
	rssFile := filepath.Join(tb.TempDir(), "rss")
	wrapped := exec.Command(timeBin, append([]string{"-f", "%M", "-o", rssFile, cmd.Path}, cmd.Args[1:]...)...)
	wrapped.Env = cmd.Env
	var stderr bytes.Buffer
	wrapped.Stderr = &stderr
	t0 := time.Now()
	out, err := wrapped.Output()
	wall := time.Since(t0)
	if err != nil {
		tb.Fatalf("%s: %v\n%s", cmd, err, stderr.Bytes())
	}
	raw, err := os.ReadFile(rssFile)
	if err != nil {
		tb.Fatal(err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		tb.Fatalf("GNU time wrote %q", raw)
	}
	return childRun{out: out, wall: wall, peakRSS: kib * 1024}
}

// loadAverage is the one-minute load average of the machine (0 when it
// cannot be read).
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return f
}

// BenchmarkImportVsPython: `pyrula case import FILE` (the built binary,
// into a file store: canonicalise, hash, compress, fsynced write) and
// Python's reference on the same indented bundle with results out of
// order, alternately, so that both see the same machine load. It checks
// that both give the same hash and reports, over the iterations: the
// ratio of Python's wall time to ours (x-python, target ≥ 5), both
// processes' peak RSS as a multiple of the canonical size (rss-x target
// ≤ 1.5), our canonical MB/s and the load average. The bundle is about
// 190 MB (-short: 4 MB, the smoke run of scripts/test).
//
//	go test -run '^$' -bench ImportVsPython -benchtime 3x -timeout 30m ./cli/
func BenchmarkImportVsPython(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 not found")
	}
	size := 190 << 20
	if testing.Short() {
		size = 4 << 20
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "indented.json")
	if err := os.WriteFile(file, genIndentedBundle(b, size), 0o644); err != nil {
		b.Fatal(err)
	}
	var goWall, pyWall time.Duration
	var goRSS, pyRSS, canon int64
	var load float64
	b.ResetTimer()
	for i := range b.N {
		load += loadAverage()
		pr := runChild(b, exec.Command(py, "-c", pythonImportReference, file))
		fields := strings.Fields(string(pr.out))
		if len(fields) != 2 {
			b.Fatalf("python printed %q", pr.out)
		}
		canon, _ = strconv.ParseInt(fields[1], 10, 64)

		store := filepath.Join(dir, fmt.Sprintf("cases-%d", i)) // empty: the import writes
		cmd := exec.Command(pyrula, "case", "import", file)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PYRULA_FIXTURE_STORE=" + store}, testenv.BinaryEnv()...)
		gr := runChild(b, cmd)
		var out struct {
			FixtureHash string `json:"fixture_hash"`
		}
		if err := json.Unmarshal(gr.out, &out); err != nil || out.FixtureHash != fields[0] {
			b.Fatalf("pyrula printed %q (%v); python's hash %s", gr.out, err, fields[0])
		}
		os.RemoveAll(store)
		goWall += gr.wall
		pyWall += pr.wall
		goRSS, pyRSS = max(goRSS, gr.peakRSS), max(pyRSS, pr.peakRSS)
	}
	b.StopTimer()
	b.ReportMetric(float64(pyWall)/float64(goWall), "x-python")
	b.ReportMetric(float64(goRSS)/float64(canon), "rss-x")
	b.ReportMetric(float64(pyRSS)/float64(canon), "python-rss-x")
	b.ReportMetric(float64(canon)*float64(b.N)/goWall.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(canon)/1e6, "canonical-MB")
	b.ReportMetric(load/float64(b.N), "load1")
}
