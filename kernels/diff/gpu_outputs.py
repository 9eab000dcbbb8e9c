#!/usr/bin/env python3
"""Replays the emulator's corpus launches on a GPU and writes the same JSON with the GPU's outputs.

    python3 kernels/diff/gpu_outputs.py emu.json > gpu.json

emu.json comes from `target/release/corpus_outputs` (benches/corpus/corpus_outputs.rs).
Everything about a launch is read from it: the PTX file (relative to the repository root), the
kernel, grid, block, dynamic shared memory, the argument block (pointer slots zeroed, with the
offsets at which to write each buffer's device address), and every buffer's input bytes. Nothing
is generated here, so the inputs are the emulator's byte for byte.

Needs CuPy (cupy-cuda13x) and numpy. Each PTX file is loaded once, with cupy.RawModule(path=...)
(its `code=` argument is CUDA C for NVRTC, not PTX), and launches run in the JSON's order, as the
emulator ran them (misc.ptx's `read_counter` reads the counter `lookup` bumped). Arguments go to
cuLaunchKernel as one packed block (CU_LAUNCH_PARAM_BUFFER_POINTER), laid out exactly as the
emulator's param_layout. Device printf output is sent to stderr so stdout stays JSON.
"""

import ctypes
import json
import os
import struct
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu_outputs.py emu.json > gpu.json")
    with open(sys.argv[1]) as f:
        doc = json.load(f)

    # Keep the JSON stream clean: fd 1 goes to stderr while kernels (and their printf) run.
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    import cupy as cp
    import numpy as np

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    device = "%s (sm_%d%d), driver %d, CuPy %s" % (
        name, props["major"], props["minor"], cp.cuda.runtime.driverGetVersion(), cp.__version__)

    modules = {}
    cases = []
    for case in doc["cases"]:
        case = dict(case)
        path = os.path.join(ROOT, case["module"])
        try:
            if path not in modules:
                modules[path] = cp.RawModule(path=path)
            kern = modules[path].get_function(case["kernel"])
            bufs = []
            for b in case["buffers"]:
                mem = cp.cuda.alloc(max(b["bytes"], 1))
                data = np.frombuffer(bytes.fromhex(b["input"]), dtype=np.uint8)
                if data.size:
                    mem.copy_from_host(data.ctypes.data, data.size)
                bufs.append(mem)
            block = bytearray(bytes.fromhex(case["args"]))
            for p in case["pointers"]:
                struct.pack_into("<Q", block, p["offset"], bufs[p["buffer"]].ptr)
            launch(cp, kern, case, bytes(block))
            cp.cuda.runtime.deviceSynchronize()
            outputs = {}
            for b, mem in zip(case["buffers"], bufs):
                if "compare" in b:
                    host = np.zeros(max(b["bytes"], 1), dtype=np.uint8)
                    mem.copy_to_host(host.ctypes.data, b["bytes"])
                    outputs[b["name"]] = host[: b["bytes"]].tobytes().hex()
            case["outputs"] = outputs
            case["status"] = "ok"
        except Exception as e:  # report and go on; a sticky CUDA error will fail the rest too
            if not any(c["status"] != "ok" for c in cases):
                traceback.print_exc()
            case["outputs"] = {}
            case["status"] = "error: %s: %s" % (type(e).__name__, e)
            print("%s:%s: %s" % (case["module"], case["kernel"], case["status"]), file=sys.stderr)
        cases.append(case)

    doc = dict(doc)
    doc["device"] = device
    doc["cases"] = cases
    sys.stdout.flush()
    json.dump(doc, json_out)
    json_out.write("\n")
    json_out.close()


def launch(cp, kern, case, block):
    """cuLaunchKernel with the whole argument block through `extra`."""
    size = ctypes.c_size_t(len(block))
    buf = ctypes.create_string_buffer(block, max(len(block), 1))
    extra = (ctypes.c_void_p * 5)(
        CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.cast(buf, ctypes.c_void_p),
        CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.cast(ctypes.pointer(size), ctypes.c_void_p),
        CU_LAUNCH_PARAM_END)
    gx, gy, gz = case["grid"]
    bx, by, bz = case["block"]
    func = kern.kernel.ptr if hasattr(kern, "kernel") else kern.ptr
    if len(block) == 0:
        # A kernel without parameters: no argument buffer at all.
        cp.cuda.driver.launchKernel(func, gx, gy, gz, bx, by, bz, case["shared_mem_bytes"], 0, 0, 0)
    else:
        cp.cuda.driver.launchKernel(func, gx, gy, gz, bx, by, bz, case["shared_mem_bytes"], 0, 0,
                                    ctypes.addressof(extra))


if __name__ == "__main__":
    main()
