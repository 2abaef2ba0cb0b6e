package canonjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/pyrula/caseworker/canonjson"
)

// chunkReader hands out its input in pieces of the given sizes, in turn.
type chunkReader struct {
	src   []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.src), c.sizes[c.i%len(c.sizes)])
	c.i++
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

// streamed canonicalises in through a Decoder reading r, as the bundle
// reader does with a file.
func streamed(r io.Reader) ([]byte, error) {
	d := canonjson.NewDecoder(r)
	out, err := d.AppendValue(nil)
	if err != nil {
		return nil, err
	}
	if err := d.CheckEOF(); err != nil {
		return nil, err
	}
	return out, nil
}

// readers are the shapes of stream each input is read through: a byte at
// a time, odd small pieces, and pieces that straddle the decoder's buffer.
func readers(in []byte) map[string]io.Reader {
	return map[string]io.Reader{
		"one-byte": iotest.OneByteReader(bytes.NewReader(in)),
		"odd":      &chunkReader{src: in, sizes: []int{7, 1, 3, 13}},
		"large":    &chunkReader{src: in, sizes: []int{64<<10 + 3, 5, 1 << 20}},
		"data-err": iotest.DataErrReader(bytes.NewReader(in)),
	}
}

// checkStreamed fails unless every stream shape gives what Canonicalize
// gives for in: the same bytes, or a refusal wrapping ErrInvalid.
func checkStreamed(t *testing.T, in []byte) {
	t.Helper()
	want, wantErr := canonjson.Canonicalize(in)
	for name, r := range readers(in) {
		got, err := streamed(r)
		switch {
		case (err == nil) != (wantErr == nil):
			t.Fatalf("%s: input %q: streamed error %v, whole error %v", name, clip(string(in)), err, wantErr)
		case err != nil && !errors.Is(err, canonjson.ErrInvalid):
			t.Fatalf("%s: input %q: error %v does not wrap ErrInvalid", name, clip(string(in)), err)
		case !bytes.Equal(got, want):
			t.Fatalf("%s: input %q\nstreamed %q\nwhole    %q", name, clip(string(in)), clip(string(got)), clip(string(want)))
		}
	}
}

func TestDecoderStreams(t *testing.T) {
	for _, v := range loadVectors(t) {
		checkStreamed(t, []byte(v.Input))
	}
	for _, c := range rejectCases {
		checkStreamed(t, []byte(c.in))
	}
	for _, c := range acceptCases {
		checkStreamed(t, []byte(c.in))
	}
	// Tokens longer than the buffer, and a document much longer than it.
	long := strings.Repeat("héllo \\n wörld ", 40000)
	checkStreamed(t, []byte(`{"b": ["`+long+`", 12345678901234567890.5e-3], "a": "`+long[:70000]+`"}`))
	checkStreamed(t, []byte(`[`+strings.Repeat("9", 4300)+`, -`+strings.Repeat("1", 4301)+`]`))
	checkStreamed(t, bundleLikeDoc(3<<20))
	// The same, indented.
	var indented bytes.Buffer
	if err := json.Indent(&indented, bundleLikeDoc(1<<20), "", "  "); err != nil {
		t.Fatal(err)
	}
	checkStreamed(t, indented.Bytes())
}

// A reader's own error is returned as it is, not as invalid input, so that
// a caller's limit or decompression error keeps its type.
func TestDecoderKeepsReaderErrors(t *testing.T) {
	boom := errors.New("disk on fire")
	for _, cut := range []int{0, 1, 5, 9, 14} {
		in := []byte(`{"a": [1.5, "text", true]}`)
		r := io.MultiReader(bytes.NewReader(in[:cut]), iotest.ErrReader(boom))
		_, err := streamed(r)
		if !errors.Is(err, boom) || errors.Is(err, canonjson.ErrInvalid) {
			t.Fatalf("cut at %d: error %v, want the reader's own", cut, err)
		}
	}
}

// The token API the bundle reader uses: names, delimiters, values, a
// duplicate name at the top refused, a comma where none belongs refused.
func TestDecoderTokens(t *testing.T) {
	in := "{ \"b\" : [ {\"y\":1,\"x\":2} , 3.10 ] ,\n \"a\\u0041\": null }  "
	d := canonjson.NewDecoder(iotest.OneByteReader(strings.NewReader(in)))
	var got []string
	expect := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	expect(d.ReadDelim('{'))
	for d.PeekKind() != '}' {
		name, err := d.ReadName()
		expect(err)
		got = append(got, string(name))
		if d.PeekKind() == '[' {
			expect(d.ReadDelim('['))
			for d.PeekKind() != ']' {
				v, err := d.AppendValue(nil)
				expect(err)
				got = append(got, string(v))
			}
			expect(d.ReadDelim(']'))
			continue
		}
		v, err := d.AppendValue(nil)
		expect(err)
		got = append(got, string(v))
	}
	expect(d.ReadDelim('}'))
	expect(d.CheckEOF())
	want := []string{"b", `{"x":2,"y":1}`, "3.1", "aA", "null"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("read %q, want %q", got, want)
	}

	for _, bad := range []string{`{"a":1,"a":2}`, `{"a":1,}`, `{"a":1 "b":2}`, `[1,]`, `[1 2]`, `{"a" 1}`} {
		d := canonjson.NewDecoder(strings.NewReader(bad))
		err := d.ReadDelim(bad[0])
		for err == nil && d.PeekKind() != 0 && d.PeekKind() != '}' && d.PeekKind() != ']' {
			if bad[0] == '{' {
				if _, err = d.ReadName(); err != nil {
					break
				}
			}
			_, err = d.AppendValue(nil)
		}
		if err == nil {
			err = d.ReadDelim(map[byte]byte{'{': '}', '[': ']'}[bad[0]])
		}
		if !errors.Is(err, canonjson.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", bad, err)
		}
	}
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

// SetMaxOutput is exact: a value whose canonical form is n bytes is read
// with a limit of n and refused with n-1, whatever token the limit falls
// in (a string that shrinks from its escapes, a float that grows, a
// closing bracket), and the buffer the Decoder grows never passes the
// limit.
func TestDecoderMaxOutputExact(t *testing.T) {
	inputs := []string{
		`"plain"`, `"\u00e9\ud83d\ude00\n\u0001\/"`, `1E5`, `-0`, `1.50`, `12345678901234567890`,
		`[[[[]]]]`, `{"b":{},"a":[]}`, `{"z":"\u0041","a":[1e300, -1.5e-7, true, null, false]}`,
		string(bundleLikeDoc(64 << 10)),
	}
	for _, in := range inputs {
		want, err := canonjson.Canonicalize([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{len(want), len(want) - 1} {
			if limit == 0 {
				continue // no limit
			}
			d := canonjson.NewDecoder(iotest.OneByteReader(strings.NewReader(in)))
			d.SetMaxOutput(int64(limit))
			got, err := d.AppendValue(nil)
			switch {
			case limit == len(want) && (err != nil || !bytes.Equal(got, want)):
				t.Fatalf("%.60s: at the limit: %v", in, err)
			case limit < len(want) && !errors.Is(err, canonjson.ErrTooLarge):
				t.Fatalf("%.60s: one byte over the limit: error %v", in, err)
			case cap(got) > limit:
				t.Fatalf("%.60s: limit %d, the buffer grew to %d", in, limit, cap(got))
			}
		}
	}
}

// A value over the limit is refused as soon as its canonical form passes
// it: a long string is not read to its end (the Decoder keeps a token whole
// in its buffer), nor a long array of small values. An escape counts as
// one byte of output until it is read (\u00e9 gives two), so a string of
// escapes is read further, at most six times the limit.
func TestDecoderMaxOutputStopsReading(t *testing.T) {
	const limit = 1 << 20
	for _, c := range []struct {
		name, in string
		most     int64
	}{
		{"string", `{"a":"` + strings.Repeat("x", 48<<20) + `"}`, 3 * limit},
		{"escaped string", `["` + strings.Repeat(`\u00e9`, 8<<20) + `"]`, 13 * limit},
		{"array", `[` + strings.Repeat(`1.5e3, "x", `, 4<<20) + `0]`, 3 * limit},
	} {
		r := &countingReader{r: strings.NewReader(c.in)}
		d := canonjson.NewDecoder(r)
		d.SetMaxOutput(limit)
		if _, err := d.AppendValue(nil); !errors.Is(err, canonjson.ErrTooLarge) {
			t.Fatalf("%s: error %v, want ErrTooLarge", c.name, err)
		}
		if r.n > c.most {
			t.Errorf("%s: read %d bytes of %d to refuse it over %d", c.name, r.n, len(c.in), limit)
		}
	}
}

// TestDecoderVisitsObjects: AppendObject visits the members of an object
// that is canonical already (copied as it is) and of one that is not
// (reordered) alike, and appends the same canonical bytes; the values after
// one that is not canonical are read right too.
func TestDecoderVisitsObjects(t *testing.T) {
	in := `[{"a":1,"b":{"c":null,"d":[2,"x"]}},{"b":"é","a":-0},{"a":1.5,"b":[]},{"a":"\u0041","b":true}]`
	want := []string{
		`{"a":1,"b":{"c":null,"d":[2,"x"]}} a=1 b={"c":null,"d":[2,"x"]}`,
		`{"a":0,"b":"é"} b="é" a=0`,
		`{"a":1.5,"b":[]} a=1.5 b=[]`,
		`{"a":"A","b":true} a="A" b=true`,
	}
	for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		d := canonjson.NewDecoder(r)
		if err := d.ReadDelim('['); err != nil {
			t.Fatal(err)
		}
		for i := 0; d.PeekKind() != ']'; i++ {
			var visited []string
			out, err := d.AppendObject([]byte("pre"), func(name, value []byte) error {
				visited = append(visited, string(name)+"="+string(value))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got := strings.TrimPrefix(string(out), "pre") + " " + strings.Join(visited, " ")
			if i >= len(want) || got != want[i] || !strings.HasPrefix(string(out), "pre") {
				t.Fatalf("object %d: got %s", i, got)
			}
		}
		if err := d.ReadDelim(']'); err != nil {
			t.Fatal(err)
		}
		if err := d.CheckEOF(); err != nil {
			t.Fatal(err)
		}
	}
}
