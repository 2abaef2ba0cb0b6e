#!/usr/bin/env python3
"""Generate the golden vectors of package canonjson.

Writes vectors.jsonl next to this script: one JSON object per line,

    {"name": ..., "input": ..., "canonical": ..., "sha256": ...}

where "input" is a JSON text, "canonical" is what Python writes for it,

    json.dumps(json.loads(input), sort_keys=True, separators=(",", ":"),
               ensure_ascii=False)

and "sha256" is the lowercase hex SHA-256 of canonical.encode("utf-8").
The file itself is written with ensure_ascii=True, so it is plain ASCII.

Only the standard library is used and the output is deterministic (fixed
seed), so rerunning the script gives the same file:

    python3 bundle/canonjson/testdata/gen_vectors.py

The Go tests read vectors.jsonl and never need python.
"""

import hashlib
import json
import math
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "vectors.jsonl")

SEED = 0x0CA5E_C0DE
N_RANDOM_DOCS = 300


# --------------------------------------------------------------------------
# Python's canonical form and the checks every vector must pass.


def canonical(text):
    return json.dumps(
        json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def _refuse_constant(name):
    raise ValueError("NaN/Infinity not allowed in a vector: %r" % name)


def _unique_pairs(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError("duplicate key in a vector: %r" % k)
        seen.add(k)
    return dict(pairs)


def _finite_float(s):
    f = float(s)
    if math.isinf(f) or math.isnan(f):
        raise ValueError("overflowing number in a vector: %r" % s)
    return f


def check_valid(text):
    """Raise unless text is something canonjson must accept: no duplicate
    keys, no NaN/Infinity, no overflowing numbers, no lone surrogates."""
    text.encode("utf-8")  # strict: no lone surrogates in the raw text
    json.loads(
        text,
        object_pairs_hook=_unique_pairs,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
    )


vectors = []
_names = set()


def add(name, text):
    assert name not in _names, name
    _names.add(name)
    check_valid(text)
    c = canonical(text)
    b = c.encode("utf-8")  # strict: no lone surrogates reached the value
    assert canonical(c) == c, name  # fixed point in Python too
    vectors.append(
        {
            "name": name,
            "input": text,
            "canonical": c,
            "sha256": hashlib.sha256(b).hexdigest(),
        }
    )


# --------------------------------------------------------------------------
# Hand-written vectors.


def handwritten():
    # Literals and top-level scalars.
    add("lit/true", "true")
    add("lit/false", "false")
    add("lit/null", "null")
    add("lit/array", "[true,false,null]")
    add("scalar/string", '"x"')
    add("scalar/int", "1")
    add("scalar/ws_int", " \t\r\n7\n\t ")
    add("scalar/empty_string", '""')

    # Strings: non-ASCII, astral, surrogate-pair escapes.
    add("str/latin1_raw", '"é"')
    add("str/latin1_escaped", r'"\u00e9"')
    add("str/latin1_escaped_upper", r'"\u00E9"')
    add("str/cjk_raw", '"中文"')
    add("str/cjk_escaped", r'"\u4e2d\u6587"')
    add("str/astral_raw", '"😀"')
    add("str/astral_escaped_pair", r'"\ud83d\ude00"')
    add("str/astral_escaped_pair_upper", r'"\uD83D\uDE00"')
    add("str/astral_mixed", '"a😀b' + r"\ud83d\ude00" + 'c\U0010ffff' + r"\udbff\udfff" + '"')
    add("str/astral_first_last", r'"\ud800\udc00\U00010000"'.replace(r"\U00010000", "\U00010000"))
    add("str/mixed_scripts", '"Ελληνικά русский עברית العربية हिन्दी 日本語 한국어"')
    add("str/combining", '"e\u0301 n\u0303 \u1e9b\u0323"')
    add("str/bom_inside", '"\ufeffx"')
    add("str/bom_inside_escaped", r'"\ufeffx"')
    add("str/nonchars", '"\ufffe\uffff\U0001fffe\U0010ffff"')
    add("str/nonchars_escaped", r'"\ufffe\uffff\ud83f\udffe\udbff\udfff"')
    add("str/replacement_char", '"\ufffd' + r"\ufffd" + '"')

    # U+2028 / U+2029 stay raw.
    add("str/u2028_raw", '"a\u2028b"')
    add("str/u2029_raw", '"a\u2029b"')
    add("str/u2028_escaped", r'"a\u2028b"')
    add("str/u2029_escaped", r'"a\u2029b"')
    add("str/u2028_u2029_key", '{"\u2028":1,' + r'"\u2029"' + ":2}")

    # HTML-ish characters stay raw.
    add("str/html_raw", '"<script>a && b</script>"')
    add("str/html_escaped", r'"\u003cx\u003e\u0026\u0027"')

    # Every control character, escaped in the input.
    for i in range(0x20):
        add("str/control_%02x_lower" % i, r'"a\u%04xb"' % i)
        add("str/control_%02x_upper" % i, r'"\u%04X"' % i)
    add("str/control_short_escapes", r'"\b\f\n\r\t"')
    add("str/control_all", '"' + "".join(r"\u%04x" % i for i in range(0x20)) + '"')
    add(
        "str/control_all_array",
        "[" + ",".join(r'"\u%04x"' % i for i in range(0x20)) + "]",
    )
    add("str/control_u001f", r'"\u001f"')
    add("str/control_u0000_mid", r'"a\u0000b\u0000"')

    # DEL is not escaped.
    add("str/del_raw", '"a\x7fb"')
    add("str/del_escaped", r'"a\u007fb"')
    add("str/c1_controls", r'"\u0080\u0085\u009f' + "\x80\x85\x9f" + '"')

    # Escapes that decode to ordinary characters.
    add("str/solidus_escaped", r'"a\/b"')
    add("str/solidus_raw", '"a/b"')
    add("str/solidus_u", r'"\u002f"')
    add("str/quote", r'"\""')
    add("str/backslash", r'"\\"')
    add("str/quote_backslash_mix", r'"\\\"\\\\\"x\u005c\u0022"')
    add("str/escaped_ascii", r'"\u0041\u0062\u0020\u007e"')
    add("str/all_short_escapes", r'"\"\\\/\b\f\n\r\t"')
    add("str/printable_ascii", json.dumps("".join(chr(i) for i in range(0x20, 0x7F))))
    add("str/long", '"' + ("abcé中😀" * 500) + '"')

    # Integers.
    add("int/zero", "0")
    add("int/neg_zero", "-0")
    add("int/neg_zero_in_array", "[-0,0,-0]")
    add("int/one", "1")
    add("int/neg_one", "-1")
    add("int/2p53", str(2**53))
    add("int/2p53_plus1", str(2**53 + 1))
    add("int/2p63", str(2**63))
    add("int/2p64_minus1", str(2**64 - 1))
    add("int/2p64", str(2**64))
    add("int/2p64_plus1", str(2**64 + 1))
    add("int/neg_2p64", str(-(2**64)))
    add("int/neg_2p64_minus1", str(-(2**64) - 1))
    add("int/10p100", str(10**100))
    add("int/neg_10p100", str(-(10**100)))
    add("int/2p1000", str(2**1000))
    add("int/digits_4300", "9" * 4300)
    add("int/digits_4300_neg", "-" + "1" * 4300)
    add("int/digits_4300_pattern", "1" + "234567890" * 477 + "123456")
    add("int/digits_4299", "-" + "8" * 4299)
    add("int/in_object", '{"a":123456789012345678901234567890,"b":-98765432109876543210}')

    # Floats: Python's repr of the double.
    floats = [
        ("1e-05", "0.00001"),
        ("1e-05_exp", "1e-5"),
        ("1e+16", "1e16"),
        ("1e+16_fixed", "10000000000000000.0"),
        ("1e+16_plus", "1e+16"),
        ("100.0", "100.0"),
        ("100.0_exp", "1e2"),
        ("neg_zero_float", "-0.0"),
        ("neg_zero_exp", "-0e0"),
        ("neg_zero_exp2", "-0.0e-5"),
        ("zero_float", "0.0"),
        ("zero_exp", "0e0"),
        ("zero_exp_big", "0e99999999999999999999"),
        ("zero_E", "0E+7"),
        ("0.1", "0.1"),
        ("0.2", "0.2"),
        ("0.3", "0.3"),
        ("0.1_long", "0.1000000000000000055511151231257827021181583404541015625"),
        ("5e-324", "5e-324"),
        ("4.9e-324", "4.9e-324"),
        ("min_subnormal_exact_half", str(5**1075) + "e-1075"),
        ("min_subnormal_above_half", str(5**1075) + "1e-1076"),
        ("min_subnormal_above_half_short", "2.4703282292062328e-324"),
        ("min_subnormal_below_half", "2.4703282292062327e-324"),
        ("min_normal", "2.2250738585072014e-308"),
        ("max_subnormal", "2.225073858507201e-308"),
        ("max_double", "1.7976931348623157e+308"),
        ("max_double_rounds_down", "1.7976931348623158e+308"),
        ("max_double_below_half", str(2**1024 - 2**970 - 1) + ".999e0"),
        ("neg_max_double", "-1.7976931348623157e308"),
        ("underflow", "1e-400"),
        ("underflow_neg", "-1e-400"),
        ("underflow_huge_exp", "1e-99999999999999999999"),
        ("underflow_many_zeros", "0." + "0" * 400 + "1"),
        ("1E5", "1E5"),
        ("1E+5", "1E+5"),
        ("1e-5_upper", "1E-5"),
        ("1.0e0", "1.0e0"),
        ("exp_leading_zeros", "1e0000000000000000000000000001"),
        ("exp_leading_zeros_neg", "1.5e-0000000000000000000002"),
        ("12345678901234567890.0", "12345678901234567890.0"),
        ("0.0001", "0.0001"),
        ("0.00010", "0.00010"),
        ("1e15", "1e15"),
        ("1e15_fixed", "1000000000000000.0"),
        ("9999999999999998.0", "9999999999999998.0"),
        ("1e16_minus_ulp", "9999999999999999.0"),
        ("123.456e-7", "123.456e-7"),
        ("2.50", "2.50"),
        ("2.0", "2.0"),
        ("2.000000000000000000000", "2.000000000000000000000"),
        ("1.5e300", "1.5e300"),
        ("1.5e-300", "1.5e-300"),
        ("neg_float", "-123.25"),
        ("2p53_plus1_float", "9007199254740993.0"),
        ("2p53_plus1_float_above", "9007199254740993.0000000000000000000000000000001"),
        ("2p53_plus3_float", "9007199254740995.0"),
        ("third", "0.3333333333333333"),
        ("pi", "3.141592653589793238462643383279502884197"),
        ("e", "2.718281828459045"),
        ("1.1", "1.1"),
        ("long_int_part_float", "1" * 5000 + ".0e-4990"),
        ("long_frac", "0." + "9" * 5000),
        ("big_exp_small_mantissa", "0.000000000000000000001e310"),
        ("1e22", "1e22"),
        ("1e23", "1e23"),
        ("8.41e21", "8.41e21"),
        ("5e-05", "0.00005"),
        ("123e-20", "123e-20"),
        ("1e-4", "1e-4"),
        ("9.999999999999999e-05", "9.999999999999999e-05"),
        ("0.000099999999999999999", "0.000099999999999999999"),
    ]
    for name, text in floats:
        add("float/" + name, text)
    add("float/array", "[" + ",".join(t for _, t in floats) + "]")

    # Containers.
    add("container/empty_object", "{}")
    add("container/empty_array", "[]")
    add("container/array_of_empty_object", "[{}]")
    add("container/array_of_empty_array", "[[]]")
    add("container/empties", '{"a":{},"b":[],"c":[{}],"d":[[]],"e":[{},[]]}')
    add("container/nested", '{"a":[1,[2,[3,{"b":{"c":[4.5,"x",null]}}]]],"d":{"e":{"f":{}}}}')
    add("container/array_mixed", '[1,"two",3.0,true,false,null,{"k":"v"},[]]')

    # Object key ordering: by code point, after unescaping.
    add("keys/basic_unsorted", '{"b":1,"a":2,"c":3}')
    add("keys/numeric_strings", '{"10":1,"9":2,"1":3,"100":4,"-1":5}')
    add("keys/case", '{"b":1,"B":2,"a":3,"A":4,"_":5}')
    add("keys/prefixes", '{"ab":1,"a":2,"":3,"abc":4,' + r'"a\u0000"' + ":5}")
    add(
        "keys/code_point_order",
        "{"
        + ",".join(
            [
                '"\U0001f600":1',
                r'"\uffff":2',
                '"z":3',
                '"é":4',
                r'"a\n":5',
                '"a!":6',
                '"\ue000":7',
                r'"\ud83d\ude00x":8',
                '"\uff01":9',
                '"\u0800":10',
                '"\u07ff":11',
                '"\x7f":12',
            ]
        )
        + "}",
    )
    add(
        "keys/astral_vs_bmp_high",
        "{" + r'"\uffff":1,"\ud83d\ude00":2,"\ue000":3,"\U00010000":4'.replace(r"\U00010000", "\U00010000") + "}",
    )
    add("keys/escaped_sorting", r'{"\u0062":1,"a":2,"c":3,"\u0041":4}')
    add("keys/control_chars", r'{"a\t":1,"a\n":2,"a":3,"a\u0000":4,"a\u001f":5," ":6}')
    add("keys/quote_backslash", r'{"\"":1,"\\":2,"a\"b":3,"/":4,"\/x":5}')
    add("keys/non_ascii", '{"中":1,"文":2,"é":3,"e":4,"f":5,"ё":6}')
    add("keys/nested_sorting", '{"z":{"y":1,"x":{"w":2,"v":3}},"a":[{"d":1,"c":2}]}')
    add("keys/many", "{" + ",".join('"k%d":%d' % (i, i) for i in reversed(range(300))) + "}")
    add("keys/u2028", '{"\u2029":1,"\u2028":2,"\u2027":3}')

    # Whitespace everywhere.
    add(
        "ws/everywhere",
        ' \t\n\r{ \t"b"\n:\r[ 1 ,\t2\n,\r{ "c" : null } ] ,\n"a"\t:\ttrue , "d" : [ ] , "e" : { } }\r\n\t ',
    )
    add("ws/array", "[\n  1,\n  2.5,\n  \"x\"\n]\n")
    add("ws/indented", json.dumps({"b": [1, {"c": "é"}], "a": None}, indent=4))
    add("ws/leading", "   \n\n\t[1]")
    add("ws/trailing", "[1]\r\n\r\n   \t")

    # Deep nesting.
    add("deep/array_500", "[" * 500 + "]" * 500)
    add("deep/array_500_scalar", "[" * 500 + "1.5" + "]" * 500)
    add("deep/object_500", '{"a":' * 499 + "{}" + "}" * 499)
    add("deep/object_500_ws", '{ "k" : ' * 499 + '"leaf"' + " }" * 499)
    mixed = ""
    for i in range(250):
        mixed += '[{"k%d":' % i
    mixed += "null"
    mixed += "}]" * 250
    add("deep/mixed_500", mixed)
    add("deep/wide_and_deep", "[" + ",".join("[" * 40 + str(i) + "]" * 40 for i in range(50)) + "]")

    # Bundle-like document. Sorting results by (kind, key) is the bundle
    # package's job, not canonjson's: the results stay in input order.
    bundle = {
        "results": [
            {"key": "step:2", "kind": "tool", "fingerprint": "ff01", "result": {"ok": True, "n": 2.5}},
            {"key": "step:1", "kind": "tool", "fingerprint": "ee02", "error": {"type": "Timeout", "message": "took > 30s & gave up <sigh>"}},
            {"key": "call:1", "kind": "model", "fingerprint": "dd03", "result": {"text": "héllo 世界 😀\u2028", "tokens": 12}},
            {"key": "call:0", "kind": "model", "fingerprint": "cc04", "result": None},
        ],
        "history": [
            {"run_seq": 1, "kind": "run:start", "at": 1700000000.125, "data": {"inputs": {"q": "why?"}}},
            {"run_seq": 2, "kind": "step:start", "at": 1700000000.5, "data": {"step": "fetch", "attempt": 1}},
            {"run_seq": 3, "kind": "step:complete", "at": 1.7000000011e9, "data": {"value": [1, 2.0, -0.0, 1e-05, 1e16, 18446744073709551617]}},
        ],
        "manifest": {
            "format": 1,
            "kind": "agent",
            "target_name": "support-bot",
            "code_version": "v1.2.3+abc",
            "registration": {
                "tools": [{"name": "search", "writes": False}, {"name": "send_mail", "writes": True}],
                "steps": [{"id": "s1", "name": "fetch", "effect": "read"}],
            },
            "recorded_config": {"model": "gpt-x", "temperature": 0.7, "max_tokens": 1024},
            "pyrula_version": "0.1.0",
            "source": {"run_id": "run_01HZX", "namespace": "default", "origin": "valkey"},
            "fork_after_seq": 3,
            "capture": {"complete": False, "missing": ["step:3"]},
            "inputs": {"question": "¿Dónde está la biblioteca?", "limit": 10, "ratio": 0.1},
        },
    }
    add("bundle/like", json.dumps(bundle, ensure_ascii=False))
    add("bundle/like_ascii_escaped", json.dumps(bundle, ensure_ascii=True))
    add("bundle/like_indented", json.dumps(bundle, ensure_ascii=False, indent=2))
    add(
        "bundle/unforked",
        json.dumps(
            {"manifest": dict(bundle["manifest"], fork_after_seq=None), "history": [], "results": []},
            ensure_ascii=False,
        ),
    )


# --------------------------------------------------------------------------
# Random vectors.

rng = random.Random(SEED)

SHORT_ESC = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}

SPECIAL_CPS = [
    0x22, 0x5C, 0x2F, 0x7F, 0x2028, 0x2029, 0x3C, 0x3E, 0x26, 0x27,
    0xFEFF, 0xFFFE, 0xFFFF, 0xFFFD, 0xE000, 0xD7FF, 0x10000, 0x10FFFF,
    0x80, 0x7FF, 0x800, 0x85, 0xA0,
]


def rand_ws():
    if rng.random() < 0.7:
        return ""
    return "".join(rng.choice(" \t\n\r") for _ in range(rng.randint(1, 3)))


def rand_cp():
    r = rng.random()
    if r < 0.35:
        return rng.randint(0x20, 0x7E)
    if r < 0.45:
        return rng.randint(0x00, 0x1F)
    if r < 0.52:
        return rng.choice(SPECIAL_CPS)
    if r < 0.62:
        return rng.randint(0x80, 0x7FF)
    if r < 0.80:
        cp = rng.randint(0x800, 0xFFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = rng.randint(0xE000, 0xFFFF)
        return cp
    return rng.randint(0x10000, 0x10FFFF)


def rand_str(max_len=12):
    return "".join(chr(rand_cp()) for _ in range(rng.randint(0, max_len)))


KEY_ALPHABET = ["a", "b", "A", "\x00", "\x1f", "\x7f", "é", "\uffff", "\ue000", "\U0001f600", "\U00010000", "!", " "]


def rand_key():
    if rng.random() < 0.5:
        return "".join(rng.choice(KEY_ALPHABET) for _ in range(rng.randint(0, 4)))
    return rand_str(8)


def u_escape(cp):
    s = "%04x" % cp
    r = rng.random()
    if r < 0.2:
        s = s.upper()
    elif r < 0.3:
        s = "".join(c.upper() if rng.random() < 0.5 else c for c in s)
    return "\\u" + s


def enc_char(ch):
    cp = ord(ch)
    must = cp < 0x20 or ch in '"\\'
    r = rng.random()
    if not must and r < 0.7:
        return ch
    if ch in SHORT_ESC and r < 0.85:
        return SHORT_ESC[ch]
    if cp >= 0x10000:
        v = cp - 0x10000
        return u_escape(0xD800 + (v >> 10)) + u_escape(0xDC00 + (v & 0x3FF))
    return u_escape(cp)


def enc_str(s):
    return '"' + "".join(enc_char(ch) for ch in s) + '"'


def rand_int_text():
    r = rng.random()
    if r < 0.05:
        return rng.choice(["0", "-0"])
    if r < 0.5:
        n = rng.randint(1, 6)
    elif r < 0.8:
        n = rng.randint(7, 25)
    else:
        n = rng.randint(26, 120)
    digits = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))
    return ("-" if rng.random() < 0.3 else "") + digits


def rand_double_bits():
    while True:
        (f,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(f):
            return f


def rand_subnormal():
    bits = rng.getrandbits(rng.randint(1, 52))
    if rng.random() < 0.5:
        bits |= 1 << 63
    (f,) = struct.unpack("<d", bits.to_bytes(8, "little"))
    return f


def rand_near_power_of_ten():
    k = rng.randint(-325, 308)
    f = float("1e%d" % k)
    for _ in range(rng.randint(0, 2)):
        f = math.nextafter(f, rng.choice([math.inf, 0.0]))
    if rng.random() < 0.3:
        f = f * rng.choice([1, 2, 5, 9.5, 0.5])
        if not math.isfinite(f):
            f = 1.0
    return -f if rng.random() < 0.3 else f


def double_text(f):
    """Some JSON number text that reads back as the double f."""
    r = rng.random()
    if r < 0.5:
        t = repr(f)
    elif r < 0.65:
        t = "%.17g" % f
    elif r < 0.8:
        t = "%.17e" % f
    elif r < 0.9:
        t = "%.25e" % f
    else:
        t = "%.40e" % f
    if rng.random() < 0.2:
        t = t.replace("e", "E")
    if rng.random() < 0.2:
        t = t.replace("e+", "e").replace("E+", "E")
    assert t not in ("inf", "-inf", "nan")
    assert float(t) == f or (f == 0 and float(t) == 0)
    return t


def rand_decimal_text():
    while True:
        sign = "-" if rng.random() < 0.3 else ""
        if rng.random() < 0.25:
            ip = "0"
        else:
            n = rng.choice([1, 1, 2, 3, 5, 8, 16, 17, 20, 25, 40])
            ip = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))
        frac = ""
        if rng.random() < 0.7:
            n = rng.choice([1, 2, 3, 6, 15, 16, 17, 18, 25, 40, 80])
            frac = "." + "".join(str(rng.randint(0, 9)) for _ in range(n))
        exp = ""
        if rng.random() < 0.6 or not frac:
            e = rng.choice([rng.randint(-30, 30), rng.randint(-340, 320)])
            es = str(abs(e))
            if rng.random() < 0.1:
                es = "0" * rng.randint(1, 5) + es
            if e < 0:
                es = "-" + es
            elif rng.random() < 0.5:
                es = "+" + es
            exp = rng.choice("eE") + es
        t = sign + ip + frac + exp
        if math.isfinite(float(t)):
            return t


def rand_number_text():
    r = rng.random()
    if r < 0.3:
        return rand_int_text()
    if r < 0.6:
        return double_text(rand_double_bits())
    if r < 0.7:
        return double_text(rand_subnormal())
    if r < 0.8:
        return double_text(rand_near_power_of_ten())
    return rand_decimal_text()


def rand_scalar_text():
    r = rng.random()
    if r < 0.4:
        return enc_str(rand_str())
    if r < 0.9:
        return rand_number_text()
    return rng.choice(["true", "false", "null"])


def rand_value_text(depth):
    r = rng.random()
    if depth >= 5 or r < 0.45:
        return rand_scalar_text()
    if r < 0.7:
        items = [rand_value_text(depth + 1) for _ in range(rng.randint(0, 5))]
        if not items:
            return "[" + rand_ws() + "]"
        return "[" + ",".join(rand_ws() + it + rand_ws() for it in items) + "]"
    keys = []
    seen = set()
    for _ in range(rng.randint(0, 6)):
        k = rand_key()
        if k not in seen:
            seen.add(k)
            keys.append(k)
    if not keys:
        return "{" + rand_ws() + "}"
    members = []
    for k in keys:
        members.append(
            rand_ws() + enc_str(k) + rand_ws() + ":" + rand_ws() + rand_value_text(depth + 1) + rand_ws()
        )
    return "{" + ",".join(members) + "}"


def random_vectors():
    for i in range(N_RANDOM_DOCS):
        # Mostly containers at the top; sometimes a bare scalar.
        while True:
            t = rand_value_text(0 if rng.random() < 0.9 else 5)
            if i % 10 == 0 or t[:1] in "[{":
                break
        add("random/%03d" % i, rand_ws() + t + rand_ws())

    # Bulk numbers: many doubles per vector.
    for i in range(4):
        add("bulk/doubles_bits_%d" % i, "[" + ",".join(double_text(rand_double_bits()) for _ in range(1000)) + "]")
    for i in range(2):
        add("bulk/doubles_repr_%d" % i, "[" + ",".join(repr(rand_double_bits()) for _ in range(1000)) + "]")
    for i in range(2):
        add("bulk/subnormals_%d" % i, "[" + ",".join(double_text(rand_subnormal()) for _ in range(500)) + "]")
    for i in range(2):
        add("bulk/near_pow10_%d" % i, "[" + ",".join(double_text(rand_near_power_of_ten()) for _ in range(1000)) + "]")
    for i in range(3):
        add("bulk/decimals_%d" % i, "[" + ",".join(rand_decimal_text() for _ in range(1000)) + "]")
    for i in range(2):
        add("bulk/ints_%d" % i, "[" + ",".join(rand_int_text() for _ in range(1000)) + "]")
    # Every repr boundary between fixed and exponent notation.
    edges = []
    for k in range(-8, 20):
        p = float("1e%d" % k)
        edges += [p, math.nextafter(p, 0.0), math.nextafter(p, math.inf), -p, p * 1.5]
    add("bulk/repr_boundaries", "[" + ",".join(repr(f) for f in edges) + "]")
    # Random strings and keys in bulk.
    add("bulk/strings", "[" + ",".join(enc_str(rand_str(30)) for _ in range(500)) + "]")
    keys = []
    seen = set()
    while len(keys) < 400:
        k = rand_key()
        if k not in seen:
            seen.add(k)
            keys.append(k)
    add("bulk/keys", "{" + ",".join(enc_str(k) + ":" + str(i) for i, k in enumerate(keys)) + "}")


def main():
    handwritten()
    random_vectors()
    with open(OUT, "w", encoding="ascii", newline="\n") as f:
        for v in vectors:
            f.write(json.dumps(v, ensure_ascii=True) + "\n")
    print("wrote %d vectors to %s" % (len(vectors), OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
