#!/usr/bin/env python3
"""The module order of docs/architecture.md, checked on every #include of the project's code.

The page's table and this test's rows name the same modules in the same order. A module may
include its own headers and those of the modules below it; nothing may include
upwards (topology reaching into optim, the transport into the runtime, ...). The public headers
(include/starling/) include only the standard library and each other, and no code outside api/
includes api/'s internal headers. Standard library only; run by meson as the 'layering' test.

usage: layering_test.py PROJECT_ROOT
"""
import pathlib
import re
import sys

# module folder -> the module folders it may include (besides itself); order as in
# docs/architecture.md "Modules and their order". Longest prefix wins.
ALLOWED = {
    "core": set(),
    "topology": {"core"},
    "compression": {"core"},
    "optim": {"core", "topology", "compression"},
    "transport": {"core", "compression"},
    # The CUDA path: the GPU codecs build their frames with the CPU codecs' wire helpers, and
    # the kernels share the per-element math of compression/ and optim/.
    "cuda": {"core", "topology", "compression", "optim"},
    "engine": {"core", "topology", "compression", "optim", "transport"},
    "scenario": {"core", "topology", "compression", "optim", "transport", "engine"},
    "runtime": {"core", "topology", "compression", "optim", "transport", "engine", "scenario"},
    # api/peer_device.cc opens the GPU through cuda/ (the one factory, docs/cuda.md)
    "api": {"core", "topology", "compression", "optim", "transport", "engine", "scenario",
            "runtime", "cuda"},
}
MODULES = sorted(ALLOWED, key=len, reverse=True)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SYSTEM_INCLUDE = re.compile(r"^\s*#\s*include\s*<([^>]+)>", re.M)


def module_of(rel: str):
    for m in MODULES:
        if rel == m or rel.startswith(m + "/"):
            return m
    return None


def documented_order(root: pathlib.Path):
    """The module folders of docs/architecture.md's "Modules and their order" block, in order."""
    text = (root / "docs" / "architecture.md").read_text(errors="replace")
    section = text.split("## Modules and their order", 1)
    if len(section) != 2 or "```" not in section[1]:
        return None
    block = section[1].split("```")[1]
    return [m.group(1) for m in re.finditer(r"^([a-z_]+)/\s", block, re.M)]


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    checked = 0
    # The architecture page's table is this test's rows, in the same order (tools/ and tests/,
    # which may include everything, are the page's alone).
    order = documented_order(root)
    if order is None:
        problems.append("docs/architecture.md: no \"Modules and their order\" block")
    elif [m for m in order if m not in ("tools", "tests")] != list(ALLOWED):
        problems.append(f"docs/architecture.md lists the modules {order}; this test's rows are "
                        f"{list(ALLOWED)} (plus tools and tests)")
    for m in ALLOWED:
        for path in sorted((root / m).rglob("*")):
            if path.suffix not in (".h", ".cc") or module_of(str(path.relative_to(root))) != m:
                continue
            checked += 1
            for inc in INCLUDE.findall(path.read_text(errors="replace")):
                target = module_of(inc)
                if target is None or target == m:
                    continue
                if target not in ALLOWED[m]:
                    problems.append(f"{path.relative_to(root)}: includes \"{inc}\" ({target} is "
                                    f"not below {m})")
    # Public headers: nothing of the project's internals, nothing but the standard library.
    for path in sorted((root / "include" / "starling").glob("*.h")):
        checked += 1
        text = path.read_text(errors="replace")
        for inc in INCLUDE.findall(text):
            problems.append(f"{path.relative_to(root)}: includes \"{inc}\" (public headers use "
                            "<starling/...> and the standard library only)")
        for inc in SYSTEM_INCLUDE.findall(text):
            if "/" in inc and not inc.startswith("starling/"):
                problems.append(f"{path.relative_to(root)}: includes <{inc}> (not the standard "
                                "library)")
    # api/'s internal headers are the door's own.
    for top in ("core", "topology", "compression", "optim", "transport", "cuda", "engine",
                "scenario", "runtime", "tools", "python"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cc"):
                continue
            for inc in INCLUDE.findall(path.read_text(errors="replace")):
                if inc.startswith("api/"):
                    problems.append(f"{path.relative_to(root)}: includes \"{inc}\" (api/ is "
                                    "internal to the public door)")
    if checked < 50:
        problems.append(f"only {checked} files checked: is {root} the project root?")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} layering problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
