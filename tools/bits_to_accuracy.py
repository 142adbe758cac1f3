#!/usr/bin/python3
"""Bits to accuracy: superseded by tools/compare.py, whose table mode this is.

    tools/bits_to_accuracy.py SPEC.json [--launcher PATH] [--out DIR] [--only a,b] [--jobs N]

Runs every run of the spec and writes curves.csv and table.md, without the plots, to DIR
(default build/bits-to-accuracy/NAME). The spec format, "target" or "targets" and
"reference" included, is described in docs/compare.md.
"""
import os
import sys

sys.dont_write_bytecode = True  # no tools/__pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

if __name__ == "__main__":
    sys.exit(compare.main(table_only=True, default_out="bits-to-accuracy"))
