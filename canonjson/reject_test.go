package canonjson_test

import (
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/canonjson"
)

type textCase struct {
	name string
	in   string
}

// nest wraps leaf in n arrays.
func nestArrays(n int, leaf string) string {
	return strings.Repeat("[", n) + leaf + strings.Repeat("]", n)
}

// nestObjects wraps leaf in n objects {"a":…}.
func nestObjects(n int, leaf string) string {
	return strings.Repeat(`{"a":`, n) + leaf + strings.Repeat("}", n)
}

// nestMixed wraps leaf in n containers, alternating arrays and objects.
func nestMixed(n int, leaf string) string {
	var open, close strings.Builder
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			open.WriteString("[")
		} else {
			open.WriteString(`{"k":`)
		}
	}
	for i := n - 1; i >= 0; i-- {
		if i%2 == 0 {
			close.WriteString("]")
		} else {
			close.WriteString("}")
		}
	}
	return open.String() + leaf + close.String()
}

// overflowHalfway is the exact decimal value halfway between the largest
// double and 2^1024: it rounds (to even) up to 2^1024, i.e. it overflows.
func overflowHalfway() string {
	v := new(big.Int).Lsh(big.NewInt(1), 1024)
	v.Sub(v, new(big.Int).Lsh(big.NewInt(1), 970))
	return v.String() + ".0"
}

// rejectCases must all be refused with an error wrapping ErrInvalid.
var rejectCases = []textCase{
	// Invalid UTF-8.
	{"utf8/raw_ff_toplevel", "\xff"},
	{"utf8/raw_fe_toplevel", "\xfe"},
	{"utf8/raw_ff_in_string", "\"\xff\""},
	{"utf8/raw_ff_in_string_mid", "\"ab\xffcd\""},
	{"utf8/raw_ff_in_key", "{\"\xff\":1}"},
	{"utf8/raw_ff_in_array", "[1,\xff]"},
	{"utf8/lone_continuation", "\"\x80\""},
	{"utf8/lone_continuation_bf", "\"a\xbfb\""},
	{"utf8/overlong_slash_2", "\"\xc0\xaf\""},
	{"utf8/overlong_nul_2", "\"\xc0\x80\""},
	{"utf8/overlong_c1", "\"\xc1\xbf\""},
	{"utf8/overlong_slash_3", "\"\xe0\x80\xaf\""},
	{"utf8/overlong_7ff_3", "\"\xe0\x9f\xbf\""},
	{"utf8/overlong_slash_4", "\"\xf0\x80\x80\xaf\""},
	{"utf8/overlong_ffff_4", "\"\xf0\x8f\xbf\xbf\""},
	{"utf8/truncated_2", "\"\xc3\""},
	{"utf8/truncated_3_of_1", "\"\xe4\""},
	{"utf8/truncated_3_of_2", "\"\xe4\xb8\""},
	{"utf8/truncated_4_of_3", "\"\xf0\x9f\x98\""},
	{"utf8/truncated_then_ascii", "\"\xf0\x9f\x98a\""},
	{"utf8/truncated_at_eof", "\"\xe4\xb8"},
	{"utf8/surrogate_d800", "\"\xed\xa0\x80\""},
	{"utf8/surrogate_dbff", "\"\xed\xaf\xbf\""},
	{"utf8/surrogate_dc00", "\"\xed\xb0\x80\""},
	{"utf8/surrogate_dfff", "\"\xed\xbf\xbf\""},
	{"utf8/surrogate_pair_cesu8", "\"\xed\xa0\xbd\xed\xb8\x80\""},
	{"utf8/surrogate_in_key", "{\"\xed\xa0\x80\":1}"},
	{"utf8/above_10ffff", "\"\xf4\x90\x80\x80\""},
	{"utf8/f5_lead", "\"\xf5\x80\x80\x80\""},
	{"utf8/f8_lead", "\"\xf8\x88\x80\x80\x80\""},
	{"utf8/latin1_e9", "\"caf\xe9\""},

	// Lone surrogate escapes.
	{"surrogate/high", `"\ud800"`},
	{"surrogate/low", `"\udc00"`},
	{"surrogate/high_upper", `"\uDBFF"`},
	{"surrogate/low_dfff", `"\udfff"`},
	{"surrogate/high_then_ascii", `"\ud800x"`},
	{"surrogate/high_then_escaped_ascii", `"\ud800\u0041"`},
	{"surrogate/high_then_high", `"\ud800\ud800"`},
	{"surrogate/low_then_high", `"\udc00\ud800"`},
	{"surrogate/high_then_newline_escape", `"\ud800\n"`},
	{"surrogate/high_then_backslash", `"\ud800\\"`},
	{"surrogate/high_then_raw_low_utf8", "\"\\ud83d\xed\xb8\x80\""},
	{"surrogate/high_then_bmp", `"\ud83d\u00e9"`},
	{"surrogate/high_at_end_of_string", `"abc\ud83d"`},
	{"surrogate/low_after_pair", `"\ud83d\ude00\ude00"`},
	{"surrogate/in_key", `{"\udfff":1}`},
	{"surrogate/in_array", `["ok","\ud800"]`},

	// NaN and infinities.
	{"const/NaN", "NaN"},
	{"const/nan", "nan"},
	{"const/Infinity", "Infinity"},
	{"const/neg_Infinity", "-Infinity"},
	{"const/inf", "inf"},
	{"const/NaN_in_array", "[NaN]"},
	{"const/Infinity_in_object", `{"a":Infinity}`},

	// Numbers that overflow a double.
	{"overflow/1e400", "1e400"},
	{"overflow/neg_1e309", "-1e309"},
	{"overflow/1e309", "1e309"},
	{"overflow/above_max", "1.7976931348623159e+308"},
	{"overflow/halfway_rounds_up", overflowHalfway()},
	{"overflow/point1e310", "0.1e310"},
	{"overflow/long_int_part_float", strings.Repeat("1", 400) + ".0"},
	{"overflow/huge_exponent", "1e99999999999999999999"},
	{"overflow/in_array", "[1,2,1e999]"},
	{"overflow/in_object", `{"x":-1E+309}`},

	// Duplicate object keys.
	{"dup/plain", `{"a":1,"a":2}`},
	{"dup/same_value", `{"a":1,"a":1}`},
	{"dup/escaped", `{"a":1,"\u0061":2}`},
	{"dup/escaped_upper", `{"\u0041":1,"A":2}`},
	{"dup/non_adjacent", `{"a":1,"b":2,"a":3}`},
	{"dup/nested", `{"x":{"k":1,"k":1}}`},
	{"dup/in_array", `[{"a":1},{"a":1,"a":1}]`},
	{"dup/astral", `{"\ud83d\ude00":1,"😀":2}`},
	{"dup/latin1", `{"é":1,"\u00e9":2}`},
	{"dup/solidus", `{"\/":1,"/":2}`},
	{"dup/empty", `{"":1,"":2}`},
	{"dup/control", `{"\n":1,"\u000a":2}`},
	{"dup/whitespace", `{ "a" : 1 , "a" : 2 }`},

	// Integers with too many digits.
	{"digits/4301", strings.Repeat("9", canonjson.MaxIntDigits+1)},
	{"digits/4301_neg", "-" + strings.Repeat("1", canonjson.MaxIntDigits+1)},
	{"digits/4301_in_array", "[" + strings.Repeat("1", canonjson.MaxIntDigits+1) + "]"},
	{"digits/10000", strings.Repeat("7", 10000)},

	// Too deep.
	{"depth/arrays_max_plus_1", nestArrays(canonjson.MaxDepth+1, "")},
	{"depth/arrays_max_plus_1_scalar", nestArrays(canonjson.MaxDepth+1, "1")},
	{"depth/objects_max_plus_1", nestObjects(canonjson.MaxDepth+1, "null")},
	{"depth/objects_max_plus_1_empty", nestObjects(canonjson.MaxDepth, "{}")},
	{"depth/mixed_max_plus_1", nestMixed(canonjson.MaxDepth+1, "0")},
	{"depth/arrays_100000", nestArrays(100000, "")},
	{"depth/unclosed_100000", strings.Repeat("[", 100000)},

	// Trailing garbage.
	{"trailing/number", "1 2"},
	{"trailing/x", "{}x"},
	{"trailing/bracket", "[]]"},
	{"trailing/two_objects", "{}{}"},
	{"trailing/nullx", "nullx"},
	{"trailing/two_literals", "true false"},
	{"trailing/two_strings", `"a""b"`},
	{"trailing/comma", "1,"},
	{"trailing/nul", "1\x00"},
	{"trailing/brace", `{"a":1}}`},

	// Empty input.
	{"empty/nothing", ""},
	{"empty/spaces", "   "},
	{"empty/newline", "\n"},
	{"empty/all_ws", " \t\r\n"},

	// Raw control characters in strings.
	{"control/nul", "\"\x00\""},
	{"control/1f", "\"\x1f\""},
	{"control/tab", "\"a\tb\""},
	{"control/newline", "\"\n\""},
	{"control/cr", "\"\r\""},
	{"control/in_key", "{\"a\x01\":1}"},

	// Leading zeros.
	{"zeros/01", "01"},
	{"zeros/neg_01", "-01"},
	{"zeros/00", "00"},
	{"zeros/neg_00", "-00"},
	{"zeros/in_array", "[01]"},
	{"zeros/float", "00.5"},

	// Single quotes.
	{"quotes/single_string", "'a'"},
	{"quotes/single_key", "{'a':1}"},

	// Trailing commas.
	{"commas/array", "[1,]"},
	{"commas/object", `{"a":1,}`},
	{"commas/only", "[,]"},
	{"commas/double", "[1,,2]"},
	{"commas/leading", "[,1]"},

	// Comments.
	{"comments/line_before", "// c\n1"},
	{"comments/block_before", "/* c */1"},
	{"comments/line_after", "1 // c"},
	{"comments/block_inside", "[1/*c*/]"},
	{"comments/hash", "#1\n2"},

	// Other malformed numbers.
	{"num/plus", "+1"},
	{"num/leading_dot", ".5"},
	{"num/trailing_dot", "1."},
	{"num/dot_exp", "1.e5"},
	{"num/exp_no_digits", "1e"},
	{"num/exp_sign_no_digits", "1e+"},
	{"num/minus_only", "-"},
	{"num/double_minus", "--1"},
	{"num/hex", "0x10"},
	{"num/minus_space", "- 1"},
	{"num/infinity_word_neg", "-inf"},

	// Other malformed strings, literals and structure.
	{"str/bad_escape_x", `"\x41"`},
	{"str/bad_escape_a", `"\a"`},
	{"str/bad_escape_U", `"\U0001F600"`},
	{"str/short_u", `"\u12"`},
	{"str/bad_hex_u", `"\u12g4"`},
	{"str/unterminated", `"abc`},
	{"str/unterminated_escape", `"abc\`},
	{"str/lone_quote", `"`},
	{"lit/tru", "tru"},
	{"lit/True", "True"},
	{"lit/NULL", "NULL"},
	{"lit/none", "None"},
	{"struct/unclosed_array", "[1"},
	{"struct/unclosed_object", `{"a":1`},
	{"struct/key_only", `{"a"}`},
	{"struct/no_value", `{"a":}`},
	{"struct/number_key", `{1:2}`},
	{"struct/bare_key", `{a:1}`},
	{"struct/colon_in_array", `[1:2]`},
	{"struct/missing_comma", `[1 2]`},
	{"struct/missing_colon", `{"a" 1}`},
	{"struct/close_only", "]"},
	{"struct/mismatched", "[}"},

	// Whitespace Python (and JSON) does not know.
	{"ws/nbsp", "\u00a01"},
	{"ws/vtab", "\v1"},
	{"ws/formfeed", "\f1"},
	{"ws/u2028", "\u20281"},
	// A leading byte-order mark: json.loads refuses it too (found by
	// FuzzCanonicalizePython); bundle.Read skips it before canonicalising.
	{"bom/leading", "\ufeff0"},
}

// acceptCases are inputs at the edges that Python's json module reads, with
// the canonical text Python writes for them.
var acceptCases = []struct {
	name, in, want string
}{
	{"ws/leading", " \t\r\n1", "1"},
	{"ws/trailing", "1 \t\r\n", "1"},
	{"ws/both", "\n\n  {\"a\" : [ ] }  \n", `{"a":[]}`},
	{"ws/string", "  \"x\"\t", `"x"`},
	{"scalar/string", `"x"`, `"x"`},
	{"scalar/int", "1", "1"},
	{"scalar/null", "null", "null"},
	{"scalar/true", "true", "true"},
	{"scalar/false", "false", "false"},
	{"scalar/neg_zero", "-0", "0"},
	{"scalar/float", "1.0", "1.0"},
	{"scalar/empty_string", `""`, `""`},
	{"depth/arrays_max", nestArrays(canonjson.MaxDepth, ""), nestArrays(canonjson.MaxDepth, "")},
	{"depth/arrays_max_scalar", nestArrays(canonjson.MaxDepth, "1"), nestArrays(canonjson.MaxDepth, "1")},
	{"depth/objects_max", nestObjects(canonjson.MaxDepth, "null"), nestObjects(canonjson.MaxDepth, "null")},
	{"depth/objects_max_empty", nestObjects(canonjson.MaxDepth-1, "{}"), nestObjects(canonjson.MaxDepth-1, "{}")},
	{"depth/mixed_max", nestMixed(canonjson.MaxDepth, "0"), nestMixed(canonjson.MaxDepth, "0")},
	{"depth/mixed_max_ws", strings.ReplaceAll(nestMixed(canonjson.MaxDepth, "-0"), ":", " : "), nestMixed(canonjson.MaxDepth, "0")},
	{"digits/4300", strings.Repeat("9", canonjson.MaxIntDigits), strings.Repeat("9", canonjson.MaxIntDigits)},
	{"digits/4300_neg", "-" + strings.Repeat("1", canonjson.MaxIntDigits), "-" + strings.Repeat("1", canonjson.MaxIntDigits)},
	{"digits/4300_in_array", "[" + strings.Repeat("5", canonjson.MaxIntDigits) + "]", "[" + strings.Repeat("5", canonjson.MaxIntDigits) + "]"},
	// The digit limit is for integers only: a float token may be longer.
	{"digits/float_5000", strings.Repeat("1", 5000) + ".0e-4990", "1111111111.1111112"},
	{"digits/float_frac_5000", "0." + strings.Repeat("0", 5000) + "1", "0.0"},
	{"overflow/max_double_rounds_down", "1.7976931348623158e+308", "1.7976931348623157e+308"},
	{"underflow/1e-400", "1e-400", "0.0"},
	{"underflow/neg", "-1e-400", "-0.0"},
	{"underflow/huge_exp", "1e-99999999999999999999", "0.0"},
	{"zero/huge_exp", "0e99999999999999999999", "0.0"},
	{"dup/not_case_insensitive", `{"a":1,"A":2}`, `{"A":2,"a":1}`},
	{"dup/same_key_other_objects", `[{"a":1},{"a":2}]`, `[{"a":1},{"a":2}]`},
	{"dup/prefix_keys", `{"a":1,"a\u0000":2}`, `{"a":1,"a\u0000":2}`},
	{"surrogate/pair", `"\ud83d\ude00"`, "\"\U0001F600\""},
	{"surrogate/pair_then_text", `"\ud83d\ude00\u00e9x"`, "\"\U0001F600\u00e9x\""},
	{"surrogate/raw_astral", "\"\U0010FFFF\"", "\"\U0010FFFF\""},
}

func TestReject(t *testing.T) {
	for _, c := range rejectCases {
		t.Run(c.name, func(t *testing.T) {
			out, err := canonjson.Canonicalize([]byte(c.in))
			if err == nil {
				t.Fatalf("accepted invalid input %q, wrote %q", clip(c.in), clip(string(out)))
			}
			if !errors.Is(err, canonjson.ErrInvalid) {
				t.Fatalf("input %q: error %v does not wrap ErrInvalid", clip(c.in), err)
			}
			// Append must refuse in the same way.
			if _, err := canonjson.Append([]byte("x"), []byte(c.in)); !errors.Is(err, canonjson.ErrInvalid) {
				t.Fatalf("input %q: Append error %v does not wrap ErrInvalid", clip(c.in), err)
			}
		})
	}
}

func TestAcceptEdges(t *testing.T) {
	for _, c := range acceptCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := canonjson.Canonicalize([]byte(c.in))
			if err != nil {
				t.Fatalf("refused %q: %v", clip(c.in), err)
			}
			if string(got) != c.want {
				t.Fatalf("input %q\ngot  %q\nwant %q", clip(c.in), clip(string(got)), clip(c.want))
			}
			again, err := canonjson.Canonicalize(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("not a fixed point: %q -> %q (%v)", clip(string(got)), clip(string(again)), err)
			}
		})
	}
}
