#!/usr/bin/env python3
"""Writes golden bundles for bundle_test.go with Python's json module.

For each case: NAME.input.json (a bundle as a writer might emit it: keys and
results in any order, extra whitespace), NAME.canonical.json (the canonical
bytes: results sorted by (kind, key), then json.dumps with sort_keys=True,
separators=(",", ":"), ensure_ascii=False), NAME.indented.json (the readable
export form: indent=2) and NAME.sha256. Run from this directory:

    python3 gen_bundles.py
"""
import hashlib
import json

FP = "0" * 63 + "1"


def canonical(obj):
    obj = dict(obj)
    obj["results"] = sorted(obj["results"], key=lambda r: (r["kind"], r["key"]))
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def indented(obj):
    obj = dict(obj)
    obj["results"] = sorted(obj["results"], key=lambda r: (r["kind"], r["key"]))
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def manifest(kind, fork, **extra):
    m = {
        "format": 1,
        "kind": kind,
        "target_name": "checkout",
        "code_version": "v1.4.2",
        "registration": {"tools": [], "steps": [
            {"id": "quote", "name": "quote", "effect": "read"},
            {"id": "reserve", "name": "reserve", "effect": "write"},
            {"id": "format_receipt", "name": "format_receipt", "effect": "pure"},
        ]},
        "recorded_config": {},
        "pyrula_version": "0.1.0",
        "source": {"run_id": "run_abc123", "namespace": "pyrula", "origin": "valkey"},
        "fork_after_seq": fork,
        "capture": {"complete": True, "missing": []},
        "inputs": {"sku": "SKU-42", "qty": 2, "note": "größe <L> & \u2028 ok \U0001F600"},
    }
    m.update(extra)
    return m


CASES = {
    "workflow": {
        "manifest": manifest("workflow", 4),
        "history": [
            {"run_seq": 1, "kind": "run:submitted", "at": "2026-11-30T10:00:00Z"},
            {"run_seq": 2, "kind": "run:start", "at": "2026-11-30T10:00:00Z", "inputs": {"sku": "SKU-42", "qty": 2}, "code_version": "v1.4.2"},
            {"run_seq": 3, "kind": "call:start", "at": "2026-11-30T10:00:01Z", "call": {"kind": "step", "key": "quote:0", "fingerprint": FP, "effect": "read"}, "input": {"sku": "SKU-42"}},
            {"run_seq": 4, "kind": "call:done", "at": "2026-11-30T10:00:01Z", "call": {"kind": "step", "key": "quote:0", "fingerprint": FP, "effect": "read"}},
        ],
        "results": [
            {"key": "reserve:0", "kind": "step", "fingerprint": FP, "result": {"reservation": "r-1", "price": 19.99}},
            {"key": "quote:0", "kind": "step", "fingerprint": FP, "result": {"price": 19.99, "currency": "EUR", "ttl": 1e-05, "big": 123456789012345678901234567890}},
            {"key": "0", "kind": "sleep", "fingerprint": FP, "result": None},
            {"key": "1", "kind": "now", "fingerprint": FP, "result": "2026-11-30T10:00:02Z"},
            {"key": "format_receipt:0", "kind": "step", "fingerprint": FP, "error": {"type": "ValueError", "message": "bad \"total\"\n"}},
            {"key": "10", "kind": "random", "fingerprint": FP, "result": 0.1},
            {"key": "9", "kind": "random", "fingerprint": FP, "result": -0.0},
        ],
    },
    "post_fork": {
        # A case forked after run:start: the results of calls after the fork
        # keep their input and the run_seq of their call:start.
        "manifest": manifest("workflow", 2),
        "history": [
            {"run_seq": 1, "kind": "run:submitted", "at": "2026-11-30T10:00:00Z"},
            {"run_seq": 2, "kind": "run:start", "at": "2026-11-30T10:00:00Z", "inputs": {"sku": "SKU-42", "qty": 2}, "code_version": "v1.4.2"},
        ],
        "results": [
            {"key": "reserve:0", "kind": "step", "fingerprint": FP, "input": {"sku": "SKU-42", "qty": 2}, "result": {"reservation": "r-1"}, "start_seq": 5},
            {"key": "quote:0", "kind": "step", "fingerprint": FP, "input": {"sku": "SKU-42", "qty": 2, "note": "größe \u2028"}, "result": {"price": 19.99}, "start_seq": 3},
            {"key": "0", "kind": "now", "fingerprint": FP, "input": {}, "result": "2026-11-30T10:00:02Z", "start_seq": 7},
        ],
    },
    "inputs_only": {
        "manifest": manifest("workflow", None),
        "history": [],
        "results": [],
    },
    "agent": {
        "manifest": manifest("agent", 2, target_name="support", registration={
            "tools": [{"name": "lookup_order", "writes": False}, {"name": "refund", "writes": True}],
            "steps": []}, recorded_config={"model": "claude-sonnet-4-5"}),
        "history": [
            {"run_seq": 1, "kind": "run:submitted", "at": "2026-11-30T10:00:00Z"},
            {"run_seq": 2, "kind": "run:start", "at": "2026-11-30T10:00:00Z", "inputs": {"q": "where is my order?"}},
        ],
        "results": [
            {"key": "toolu_01", "kind": "tool", "fingerprint": FP, "result": {"status": "shipped"}},
            {"key": "0", "kind": "model", "fingerprint": FP, "result": {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}]}},
        ],
    },
}


def main():
    for name, obj in CASES.items():
        # The input: keys in insertion order, results unsorted, indented by 4.
        with open(f"{name}.input.json", "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=4, ensure_ascii=True))
        canon = canonical(obj)
        with open(f"{name}.canonical.json", "w", encoding="utf-8", newline="") as f:
            f.write(canon)
        with open(f"{name}.indented.json", "w", encoding="utf-8", newline="") as f:
            f.write(indented(obj))
        with open(f"{name}.sha256", "w") as f:
            f.write(hashlib.sha256(canon.encode()).hexdigest() + "\n")


if __name__ == "__main__":
    main()
