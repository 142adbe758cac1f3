"""The README's install-and-build block ("Embedding in your trainer") against what this build
installs (meson introspect --installed), so that the commands work as written:

- it reuses the quick start's build folder (`meson configure build -Dprefix=...`, not a second
  `meson setup build`, which says "Directory already configured" and keeps /usr/local);
- the PKG_CONFIG_PATH it exports is the folder where meson installs starling.pc under that
  prefix, and the rpath is the library's folder;
- the compile line writes `trainer`, the program the README then runs (`-- ./trainer`);
- the Python module's folder it names is where meson installs it.

Usage: readme_test.py SOURCE_ROOT BUILD_ROOT (standard library only; skipped, 77, without meson).
"""

import json
import os
import re
import shutil
import subprocess
import sys


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def main():
    source, build = sys.argv[1], sys.argv[2]
    meson = shutil.which("meson")
    if meson is None:
        print("skipped: no meson on PATH")
        sys.exit(77)
    readme = open(os.path.join(source, "README.md")).read()
    section = readme[readme.index("## Embedding in your trainer"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    if block is None:
        fail("no sh block in 'Embedding in your trainer'")
    text = block.group(1).replace("\\\n", " ")
    lines = [line.split("#")[0].strip() for line in text.splitlines() if line.strip()]

    # 1. The quick start's build folder, reconfigured; not a second `meson setup build`.
    if not lines[0].startswith("meson configure build -Dprefix=$HOME/.local && "
                               "meson install -C build"):
        fail(f"the first command should reconfigure the quick start's build: {lines[0]!r}")
    prefix_text = "$HOME/.local"

    # 2. What meson installs, with this build's prefix in place of $HOME/.local.
    options = json.loads(subprocess.run([meson, "introspect", build, "--buildoptions"],
                                        capture_output=True, text=True, check=True).stdout)
    prefix = next(o["value"] for o in options if o["name"] == "prefix")
    installed = json.loads(subprocess.run([meson, "introspect", build, "--installed"],
                                          capture_output=True, text=True, check=True).stdout)
    files = set(installed.values())

    def under_prefix(path):
        return path.replace(prefix_text, prefix)

    export = [line for line in lines if line.startswith("export PKG_CONFIG_PATH=")]
    if len(export) != 1:
        fail(f"the block should export PKG_CONFIG_PATH: {lines}")
    pc_dir = under_prefix(export[0].split("=", 1)[1])
    if os.path.join(pc_dir, "starling.pc") not in files:
        fail(f"starling.pc is not installed in {pc_dir} (meson installs: "
             f"{sorted(f for f in files if f.endswith('.pc'))})")

    compile_line = next((line for line in lines if line.startswith("c++ ")), None)
    if compile_line is None:
        fail("no compile line")
    if " -o trainer " not in f" {compile_line} ":
        fail(f"the compile line should write ./trainer, which the README runs: {compile_line!r}")
    if "-- ./trainer" not in section:
        fail("the README should run the trainer it built (-- ./trainer)")
    rpath = re.search(r"-Wl,-rpath,(\S+)", compile_line)
    if rpath is None or not any(f.startswith(under_prefix(rpath.group(1)) + "/libstarling")
                                for f in files):
        fail(f"the rpath should be the installed library's folder: {compile_line!r}")

    # 3. The Python module's folder.
    module = re.search(r"puts the Python module in `([^`]+)`", section.replace("\n", " "))
    if module is None:
        fail("the block's note should name the Python module's folder")
    py_dir = under_prefix(module.group(1))
    if os.path.join(py_dir, "starling", "__init__.py") not in files:
        fail(f"the Python module is not installed in {py_dir} (meson installs: "
             f"{sorted(f for f in files if f.endswith('__init__.py'))})")
    print("readme: the install-and-build block matches what meson installs")


if __name__ == "__main__":
    main()
