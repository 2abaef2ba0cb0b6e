package cli

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
)

func TestReadKeepFile(t *testing.T) {
	t.Parallel()
	h1 := strings.Repeat("a", 64)
	h2 := strings.Repeat("0", 63) + "f"
	for _, tc := range []struct {
		name string
		in   string
		want []string // hashes, or nil with wantErr
		err  string   // substring of the invalid_keep_hash message
	}{
		{"empty", "", []string{}, ""},
		{"one", h1 + "\n", []string{h1}, ""},
		{"no final newline", h1, []string{h1}, ""},
		{"comments and blanks", "# header\n\n" + h1 + "\n   \n\t" + h2 + "\t# why\n#" + strings.Repeat("b", 64) + "\n", []string{h2, h1}, ""},
		{"crlf", h1 + "\r\n" + h2 + "\r\n", []string{h2, h1}, ""},
		{"bom", "\ufeff" + h1 + "\n", []string{h1}, ""},
		{"duplicates", h1 + "\n" + h1 + "\n", []string{h1}, ""},
		{"upper case", strings.ToUpper(h1) + "\n", nil, "keep.txt:1"},
		{"short", h1 + "\n" + "abc\n", nil, `"abc" (keep.txt:2)`},
		{"prefix", "sha256:" + h1 + "\n", nil, "keep.txt:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := map[bundle.Hash]bool{}
			err := readKeepFile(strings.NewReader(tc.in), "keep.txt", set)
			if tc.err != "" {
				e := messages.AsError(err)
				if e == nil || e.Code != messages.InvalidKeepHash || !strings.Contains(e.Message, tc.err) {
					t.Fatalf("err = %v, want invalid_keep_hash naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for h := range maps.Keys(set) {
				got = append(got, string(h))
			}
			slices.Sort(got)
			if got == nil {
				got = []string{}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
