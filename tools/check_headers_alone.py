#!/usr/bin/env python3
"""Compiles each public header and each header of the store authors' tier alone (one
translation unit that includes only it, -fsyntax-only), so that none depends on
another being included first; and each header of distlock/src/ alone with
DISTLOCK_SEPARATE_COMPILATION, as the one file of a separately compiled program
includes it.
  check_headers_alone.py <compiler> <include dir> [extra flags...]
"""
import concurrent.futures
import pathlib
import subprocess
import sys
import tempfile


def headers(root):
    top = sorted(p for p in (root / "distlock").glob("*.hpp"))
    tier = sorted((root / "distlock" / "backend").glob("*.hpp"))
    src = sorted((root / "distlock" / "src").glob("*.hpp"))
    return [(p.relative_to(root).as_posix(), False) for p in top + tier] + \
           [(p.relative_to(root).as_posix(), True) for p in src]


def compile_alone(compiler, include, flags, entry):
    header, separately = entry
    with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as tu:
        if separately:
            tu.write("#define DISTLOCK_SEPARATE_COMPILATION\n")
        tu.write(f"#include <{header}>\n")
    r = subprocess.run([compiler, "-std=c++20", "-fsyntax-only", "-I", include, *flags, tu.name],
                       capture_output=True, text=True)
    pathlib.Path(tu.name).unlink()
    return header, r.returncode, r.stderr


def main():
    compiler, include, *flags = sys.argv[1:]
    failed = 0
    names = headers(pathlib.Path(include))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for header, rc, err in pool.map(lambda h: compile_alone(compiler, include, flags, h), names):
            if rc != 0:
                failed += 1
                print(f"{header}: does not compile alone\n{err}")
    print(f"{len(names) - failed} of {len(names)} headers compile alone")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
