#!/usr/bin/env python3
"""Checks that every C++ code block of the user documentation is taken from a program
in examples/ (a source or header file, which the build compiles and the tests run):
each block's lines, blank lines aside and compared without their indentation, must
appear in that order in one example file. A block that no example contains is
printed with its first missing line.

    python3 tools/check_snippets.py            # from the repository's root
"""
import pathlib
import re
import sys

DOCS = ["README.md", "docs/policies.md", "docs/testing.md", "docs/fencing.md", "docs/metrics.md", "docs/shared.md",
        "docs/election.md", "docs/lock_delay.md"]
ROOT = pathlib.Path(__file__).resolve().parent.parent


def blocks(text):
    """(line number, lines) of every ```cpp block."""
    for m in re.finditer(r"^```cpp\n(.*?)^```", text, re.M | re.S):
        yield text.count("\n", 0, m.start()) + 1, m.group(1).splitlines()


def significant(lines):
    return [l.strip() for l in lines if l.strip()]


def missing_line(block, example):
    """None when `block` is a subsequence of `example`, else the first line not found."""
    i = 0
    for line in block:
        while i < len(example) and example[i] != line:
            i += 1
        if i == len(example):
            return line
        i += 1
    return None


def main():
    sources = sorted((ROOT / "examples").glob("*.cpp")) + sorted((ROOT / "examples").glob("*.hpp"))
    examples = {p.name: significant(p.read_text().splitlines()) for p in sources}
    failures = 0
    checked = 0
    for doc in DOCS:
        path = ROOT / doc
        if not path.exists():
            continue
        for line_no, lines in blocks(path.read_text()):
            block = significant(lines)
            checked += 1
            misses = {name: missing_line(block, ex) for name, ex in examples.items()}
            if any(m is None for m in misses.values()):
                continue
            failures += 1
            closest = max(misses, key=lambda n: block.index(misses[n]))
            print(f"{doc}:{line_no}: this block is in no program of examples/; "
                  f"closest {closest}, which lacks: {misses[closest]}")
    print(f"{checked} blocks checked, {failures} not taken from examples/")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
