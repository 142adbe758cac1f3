"""The Python tools as a user runs them: tools/make_libsvm.py's sizes and flags, tools/compare.py's
default build folder. Standard library only; run by meson (suite integration) or directly:
    python3 tests/integration/tools_test.py
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no tools/__pycache__ in the source tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import compare  # noqa: E402

MAKE_LIBSVM = os.path.join(ROOT, "tools", "make_libsvm.py")


def make_libsvm(*args):
    return subprocess.run([sys.executable, MAKE_LIBSVM, *args], capture_output=True, text=True)


def samples(text):
    """(label, {index: value}) per data line."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        label, *pairs = line.split()
        out.append((label, {int(i): float(v) for i, v in (p.split(":") for p in pairs)}))
    return out


class MakeLibsvm(unittest.TestCase):
    def test_defaults_write_the_shipped_files(self):
        for args, name in (((), "sparse-logistic.svm"), (("--zipf",), "zipf-logistic.svm")):
            with open(os.path.join(ROOT, "scenarios", "data", name)) as f:
                self.assertEqual(make_libsvm(*args).stdout, f.read(), name)

    def test_samples_and_features_size_the_dense_set(self):
        r = make_libsvm("--samples", "7", "--features", "5")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = samples(r.stdout)
        self.assertEqual(len(rows), 7)
        self.assertLessEqual(max(max(x) for _, x in rows), 5)
        self.assertTrue(r.stdout.startswith(
            "# 7 samples, 5 features, density 0.2: tools/make_libsvm.py --samples 7 --features 5\n"))
        dense = samples(make_libsvm("--samples", "50", "--features", "10", "--density", "1").stdout)
        self.assertEqual([len(x) for _, x in dense], [10] * 50)

    def test_zipf_sizes(self):
        r = make_libsvm("--zipf", "--samples", "9", "--features", "50", "--nnz", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = samples(r.stdout)
        self.assertEqual(len(rows), 9)
        self.assertLessEqual(max(max(x) for _, x in rows), 50)
        self.assertLessEqual(max(len(x) for _, x in rows), 3)

    def test_flags_of_the_other_set_are_refused(self):
        for args, message in (
                (("--nnz", "3"), "--nnz only applies to the Zipf set (--zipf)"),
                (("--exponent", "2", "--nnz", "3"), "--nnz and --exponent only apply to the Zipf set"),
                (("--zipf", "--density", "0.5"), "--density only applies to the dense set"),
                (("--samples", "0"), "argument --samples: expected a positive integer, got '0'"),
                (("--features", "x"), "argument --features: expected a positive integer"),
                (("--density", "1.5"), "argument --density: expected a number in (0, 1]"),
                (("--zipf", "--exponent", "nan"), "argument --exponent: expected a number >= 0")):
            r = make_libsvm(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr, args)
            self.assertEqual(r.stdout, "", args)


# A stand-in for node-launcher: records how it was called and writes a converging metrics.jsonl.
FAKE_LAUNCHER = """#!{python}
import json, os, sys
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls"), "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "metrics.jsonl"), "w") as f:
    for r in range(4):
        f.write(json.dumps({{"round": r, "rel_error": 10.0 ** -r, "bytes_sent": 100 * r}}) + "\\n")
"""

SPEC = {"name": "tiny", "target": 1e-2,
        "base": {"schema_version": 1, "nodes": 2, "rounds": 3, "topology": {"kind": "ring"},
                 "problem": {"kind": "least_squares",
                             "data": {"synthetic": {"samples": 4, "features": 2}}}},
        "runs": [{"label": "a", "algorithm": {"kind": "nids", "step_size": 0.1}}]}


class CompareDefaults(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.saved_root = compare.ROOT
        compare.ROOT = self.root  # the repository compare.py thinks it is in
        self.spec = os.path.join(self.root, "tiny.json")
        with open(self.spec, "w") as f:
            json.dump(SPEC, f)

    def tearDown(self):
        compare.ROOT = self.saved_root
        self.tmp.cleanup()

    def launcher_in(self, build):
        path = os.path.join(self.root, build, "tools", "node-launcher")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as f:
            f.write(FAKE_LAUNCHER.format(python=sys.executable))
        os.chmod(path, 0o755)
        return path

    def run_compare(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = compare.main([self.spec, "--table-only", *args])
        return rc, err.getvalue()

    def test_without_a_build_it_names_build_and_tools_dev(self):
        with self.assertRaises(SystemExit) as e:
            self.run_compare()
        self.assertIn(os.path.join(self.root, "build", "tools", "node-launcher"), str(e.exception.code))
        self.assertIn("tools/dev build", str(e.exception.code))

    def test_default_is_the_build_folder_tools_dev_makes(self):
        launcher = self.launcher_in("build")
        rc, err = self.run_compare()
        self.assertEqual(rc, 0, err)
        with open(os.path.join(os.path.dirname(launcher), "calls")) as f:
            calls = [json.loads(line) for line in f]
        out = os.path.join(self.root, "build", "compare", "tiny")
        self.assertEqual(calls, [["simulate", os.path.join(out, "a.json"), "--out", os.path.join(out, "a")]])
        self.assertTrue(os.path.exists(os.path.join(out, "table.md")))

    def test_build_picks_another_folder(self):
        self.launcher_in("build")
        launcher = self.launcher_in("build-release")
        rc, err = self.run_compare("--build", "build-release")
        self.assertEqual(rc, 0, err)
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(launcher), "calls")))
        self.assertFalse(os.path.exists(os.path.join(self.root, "build", "tools", "calls")))
        self.assertTrue(os.path.exists(os.path.join(self.root, "build-release", "compare", "tiny",
                                                    "table.md")))

    def test_compare_sh_runs_its_release_build(self):
        with open(os.path.join(ROOT, "tools", "compare.sh")) as f:
            text = f.read()
        self.assertIn("ninja -C build-release tools/node-launcher", text)
        self.assertIn("tools/compare.py --build build-release \"$@\"", text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
