package canonjson_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
)

// pythonCanon is the program behind FuzzCanonicalizePython: the hash's
// definition, json.dumps(json.loads(doc), sort_keys=True, separators=(",", ":"),
// ensure_ascii=False), one document per line. A request line is the input's
// bytes in hex; the reply line is JSON: {"ok": true, "out": hex of the UTF-8
// output, "lenient": [...]} or {"ok": false, "err": "..."}. "lenient" names
// what json.loads took that docs/bundle-format.md refuses: "constant" (NaN,
// Infinity), "overflow" (a float that overflows to infinity), "duplicate" (a
// duplicate object key; Python keeps the last value), "surrogate" (a lone
// surrogate escape). A refusal for nesting depth is {"ok": false, "err":
// "depth"}: where Python gives up depends on its recursion limit.
const pythonCanon = `
import json, math, sys

class Lenient(Exception):
    pass

def canonical(doc):
    return json.dumps(json.loads(doc), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

def lenient(doc):
    found = set()
    def constant(name):
        found.add("constant")
        return float(name.replace("Infinity", "inf"))
    def pairs(ps):
        keys = [k for k, _ in ps]
        if len(set(keys)) != len(keys):
            found.add("duplicate")
        return dict(ps)
    def flt(s):
        f = float(s)
        if math.isinf(f):
            found.add("overflow")
        return f
    json.loads(doc, parse_constant=constant, object_pairs_hook=pairs, parse_float=flt)
    return found

def answer(line):
    try:
        raw = bytes.fromhex(line)
        doc = raw.decode("utf-8")
    except ValueError:
        return {"ok": False, "err": "utf8"}
    try:
        out = canonical(doc)
    except RecursionError:
        return {"ok": False, "err": "depth"}
    except ValueError as e:
        return {"ok": False, "err": type(e).__name__}
    found = lenient(doc)
    try:
        b = out.encode("utf-8")
    except UnicodeEncodeError:
        found.add("surrogate")
        b = out.encode("utf-8", "surrogatepass")
    return {"ok": True, "out": b.hex(), "lenient": sorted(found)}

for line in sys.stdin:
    sys.stdout.write(json.dumps(answer(line.strip())) + "\n")
    sys.stdout.flush()
`

// pyReply is one reply of pythonCanon.
type pyReply struct {
	OK      bool     `json:"ok"`
	Out     string   `json:"out"`
	Lenient []string `json:"lenient"`
	Err     string   `json:"err"`
}

// pyCanon is one python3 process running pythonCanon, shared by every input
// of a fuzz worker.
type pyCanon struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	err  error
	once sync.Once
}

func (p *pyCanon) start() error {
	p.once.Do(func() {
		p.cmd = exec.Command("python3", "-c", pythonCanon)
		var err error
		if p.in, err = p.cmd.StdinPipe(); err != nil {
			p.err = fmt.Errorf("python3 stdin: %w", err)
			return
		}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			p.err = fmt.Errorf("python3 stdout: %w", err)
			return
		}
		p.out = bufio.NewReaderSize(stdout, 1<<20)
		if err := p.cmd.Start(); err != nil {
			p.err = fmt.Errorf("start python3: %w", err)
		}
	})
	return p.err
}

// canon asks Python for the canonical form of in.
func (p *pyCanon) canon(in []byte) (pyReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.start(); err != nil {
		return pyReply{}, err
	}
	req := make([]byte, 0, 2*len(in)+1)
	req = hex.AppendEncode(req, in)
	req = append(req, '\n')
	if _, err := p.in.Write(req); err != nil {
		return pyReply{}, fmt.Errorf("write to python3: %w", err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return pyReply{}, fmt.Errorf("read from python3: %w", err)
	}
	var r pyReply
	if err := json.Unmarshal(line, &r); err != nil {
		return pyReply{}, fmt.Errorf("python3 reply %q: %w", clip(string(line)), err)
	}
	return r, nil
}

func (p *pyCanon) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.in.Close()
	_ = p.cmd.Wait()
}

// FuzzCanonicalizePython is the differential fuzzer against the hash's
// definition itself: Python's json module, in one python3 process per fuzz
// worker. For every input, Canonicalize and Python give the same bytes or
// both refuse, except where docs/bundle-format.md documents a difference:
//   - Canonicalize refuses what Python's json.loads is lenient about (NaN and
//     Infinity, floats that overflow, duplicate keys, lone surrogates);
//   - a leading byte-order mark is skipped, where json.loads refuses it;
//   - nesting depth: refused beyond MaxDepth, while Python gives up where its
//     recursion limit says.
//
// Every disagreement found is a seed of rejectCases or acceptCases, or a
// golden vector in testdata/vectors.jsonl. It skips when python3 is missing.
func FuzzCanonicalizePython(f *testing.F) {
	if _, err := exec.LookPath("python3"); err != nil {
		f.Skip("python3 is not on PATH")
	}
	for _, v := range loadVectors(f) {
		if len(v.Input) < 4096 {
			f.Add([]byte(v.Input))
		}
	}
	for _, c := range rejectCases {
		if len(c.in) < 4096 {
			f.Add([]byte(c.in))
		}
	}
	for _, c := range acceptCases {
		if len(c.in) < 4096 {
			f.Add([]byte(c.in))
		}
	}
	py := &pyCanon{}
	f.Cleanup(py.stop)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := canonjson.Canonicalize(in)
		if err != nil && !errors.Is(err, canonjson.ErrInvalid) {
			t.Fatalf("input %q: error %v does not wrap ErrInvalid", clip(string(in)), err)
		}
		r, perr := py.canon(in)
		if perr != nil {
			t.Fatalf("python3: %v", perr)
		}
		if r.Err == "depth" {
			return // both refuse, or Go is within MaxDepth: its own fuzzer checks the bytes
		}
		if bytes.HasPrefix(in, []byte("\xef\xbb\xbf")) && err == nil {
			// json.loads refuses a BOM; bundle.Read skips it, and
			// Canonicalize may. If it does, the rest must be what Python
			// gives without it.
			if r, perr = py.canon(in[3:]); perr != nil {
				t.Fatalf("python3: %v", perr)
			}
		}
		var want []byte
		if r.OK {
			if want, perr = hex.DecodeString(r.Out); perr != nil {
				t.Fatalf("python3 output %q: %v", clip(r.Out), perr)
			}
		}
		switch {
		case err != nil && !r.OK:
			// Both refuse.
		case err != nil && r.OK:
			if len(r.Lenient) == 0 {
				t.Fatalf("refused what Python accepts\ninput:  %q\nerror:  %v\npython: %q", clip(string(in)), err, clip(string(want)))
			}
		case err == nil && !r.OK:
			t.Fatalf("accepted what Python refuses (%s)\ninput:  %q\noutput: %q", r.Err, clip(string(in)), clip(string(out)))
		case len(r.Lenient) > 0:
			t.Fatalf("accepted what the format refuses (Python was lenient: %v)\ninput:  %q\noutput: %q", r.Lenient, clip(string(in)), clip(string(out)))
		case !bytes.Equal(out, want):
			off := firstDiff(out, want)
			t.Fatalf("output differs from Python's at offset %d\ninput:  %q\ngot:    %q\npython: %q\nnear:   got %q python %q",
				off, clip(string(in)), clip(string(out)), clip(string(want)), around(string(out), off), around(string(want), off))
		}
	})
}
