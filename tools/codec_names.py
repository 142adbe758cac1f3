#!/usr/bin/env python3
"""Prints the codec names of compression/compressor.cc's table (kCodecs), one per line, in
table order: the build reads them for the fuzz targets, one per codec, so that a new codec's row
is also its fuzz target. Standard library only (it runs at configure time)."""
import pathlib
import re
import sys

source = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "compression/compressor.cc").read_text()
table = source[source.index("kCodecs[] = {"):]
table = table[:table.index("};")]
names = re.findall(r'STARLING_CODEC\(\s*k\w+,\s*"([a-z0-9_]+)"', table)
if not names:
    sys.exit("codec_names.py: no STARLING_CODEC rows in the kCodecs table")
print("\n".join(names))
