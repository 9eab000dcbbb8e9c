#!/usr/bin/env python3
"""Compares emulator and GPU outputs of the kernel corpus, launch by launch.

    python3 kernels/diff/compare.py emu.json gpu.json

Both files have the format corpus_outputs writes (gpu_outputs.py keeps it). Each output buffer
says how it is compared (set in benches/corpus/corpus_outputs.rs):
  exact  byte for byte (optionally but for listed elements, e.g. a scheduling-dependent atomic);
  float  element-wise: bit-exact when max_ulp is 0 (any NaN matches any NaN, +0 != -0), else an
         element passes within max_ulp ulps, or max_abs absolutely, or max_rel relatively (each list
         applies cyclically over the elements); the bounds are those of host/ptx-emu/APPROX.md.
Prints a table and exits 1 if any launch fails its rule (or failed to run on either side).
Needs only the standard library.
"""

import json
import struct
import sys


def ordered(bits, width):
    """Maps float bits to integers whose distance is the ulp distance."""
    sign = 1 << (width - 1)
    return -(bits & (sign - 1)) if bits & sign else bits


def elems(hexstr, elem):
    raw = bytes.fromhex(hexstr)
    fmt, width, ifmt = {"f32": ("<f", 4, "<I"), "f64": ("<d", 8, "<Q"), "f16": ("<e", 2, "<H")}[elem]
    n = len(raw) // width
    vals = [struct.unpack_from(fmt, raw, i * width)[0] for i in range(n)]
    bits = [struct.unpack_from(ifmt, raw, i * width)[0] for i in range(n)]
    return vals, bits, width * 8


def cyc(lst, i, default):
    return lst[i % len(lst)] if lst else default


def compare_float(a_hex, b_hex, rule):
    av, ab, width = elems(a_hex, rule["elem"])
    bv, bb, _ = elems(b_hex, rule["elem"])
    ignore = set(rule.get("ignore", []))
    worst_ulp, worst_abs, bad, exact, checked = 0, 0.0, [], 0, 0
    for i in range(min(len(av), len(bv))):
        if i in ignore:
            continue
        checked += 1
        x, y = av[i], bv[i]
        if x != x and y != y:
            exact += 1
            continue
        if ab[i] == bb[i]:
            exact += 1
            continue
        if x != x or y != y:
            ulp, diff = float("inf"), float("inf")
        else:
            ulp = abs(ordered(ab[i], width) - ordered(bb[i], width))
            if x == 0 and y == 0:
                ulp = 1  # +0 vs -0
            diff = abs(x - y) if abs(x) != float("inf") and abs(y) != float("inf") else float("inf")
        worst_ulp = max(worst_ulp, ulp)
        if diff != float("inf"):
            worst_abs = max(worst_abs, diff)
        ok = ulp <= cyc(rule.get("max_ulp", []), i, 0)
        ok = ok or diff <= cyc(rule.get("max_abs", []), i, 0.0)
        rel = rule.get("max_rel", 0.0)
        ok = ok or (rel > 0 and diff <= rel * max(abs(x), abs(y)))
        if not ok:
            bad.append((i, x, y, ulp))
    n = min(len(av), len(bv))
    detail = "%d/%d bit-equal, max %s ulp, max |d| %.3g" % (exact, checked, worst_ulp, worst_abs)
    if len(av) != len(bv):
        bad.append((n, None, None, "length"))
    return bad, detail


def compare_exact(a_hex, b_hex, rule):
    a, b = bytes.fromhex(a_hex), bytes.fromhex(b_hex)
    eb = rule.get("elem_bytes", 1)
    ignore = set(rule.get("ignore", []))
    bad = []
    for i in range(0, max(len(a), len(b)), eb):
        if i // eb in ignore:
            continue
        if a[i:i + eb] != b[i:i + eb]:
            bad.append((i // eb, a[i:i + eb].hex(), b[i:i + eb].hex(), None))
    return bad, "%d bytes%s" % (len(a), ", %d elements not compared" % len(ignore) if ignore else "")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py emu.json gpu.json")
    with open(sys.argv[1]) as f:
        emu = json.load(f)
    with open(sys.argv[2]) as f:
        gpu = json.load(f)
    print("emulator: %s" % emu.get("device"))
    print("gpu:      %s" % gpu.get("device"))
    gcases = {(c["module"], c["kernel"], i): c for i, c in enumerate(gpu["cases"])}
    rows, failed = [], 0
    for i, e in enumerate(emu["cases"]):
        g = gcases.get((e["module"], e["kernel"], i))
        name = "%s:%s" % (e["module"].replace("kernels/", ""), e["kernel"])
        if g is None:
            rows.append((name, "-", "FAIL", "missing from gpu.json"))
            failed += 1
            continue
        if e["status"] != "ok" or g["status"] != "ok":
            rows.append((name, "-", "FAIL", "emu: %s; gpu: %s" % (e["status"], g["status"])))
            failed += 1
            continue
        bufs = [b for b in e["buffers"] if "compare" in b]
        if not bufs:
            rows.append((name, "-", "ok", "ran on both (no outputs)"))
        for b in bufs:
            rule = b["compare"]
            a_hex, b_hex = e["outputs"].get(b["name"], ""), g["outputs"].get(b["name"], "")
            if rule["kind"] == "float":
                bad, detail = compare_float(a_hex, b_hex, rule)
                ulps = rule.get("max_ulp") or [0]
                if max(ulps) == 0 and not any(rule.get("max_abs") or []) and not rule.get("max_rel"):
                    kind = "%s bit-exact" % rule["elem"]
                elif len(ulps) <= 8:
                    kind = "%s <=%s ulp" % (rule["elem"], max(ulps))
                else:
                    kind = "%s bounded" % rule["elem"]
            else:
                bad, detail = compare_exact(a_hex, b_hex, rule)
                kind = "exact"
            verdict = "ok" if not bad else "FAIL"
            if bad:
                failed += 1
                shown = ", ".join("[%s] emu %s gpu %s%s" % (j, x, y, "" if u is None else " (%s ulp)" % u) for j, x, y, u in bad[:3])
                detail += "; %d mismatches: %s" % (len(bad), shown)
            rows.append(("%s.%s" % (name, b["name"]), kind, verdict, detail))
    for s in emu.get("skipped", []):
        rows.append((s["kernel"].replace("kernels/", ""), "-", "skip", s["why"]))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print("%-*s  %-*s  %-4s  %s" % (w0, "output", w1, "rule", "", "detail"))
    for r in rows:
        print("%-*s  %-*s  %-4s  %s" % (w0, r[0], w1, r[1], r[2], r[3]))
    total = sum(1 for r in rows if r[2] in ("ok", "FAIL"))
    print("%d passed, %d failed" % (total - failed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
