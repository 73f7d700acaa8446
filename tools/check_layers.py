#!/usr/bin/env python3
"""Checks that the include tree keeps its layers (docs/architecture.md, "Layout").

 - Store code (include/distlock/<store>/) includes the store authors' tier
   (backend/), transport/, the codecs (http/, http2/, grpc/, protobuf/, aws/,
   util/), its own folder, the
   vocabulary headers and the public policies a store names as its default; never
   the core's internals (detail/, claims/ apart from the TTL claim a store's own
   policy opens, the mutex, leases), and it never names distlock::detail.
 - The tier (backend/) and the low-level utilities (util/) include nothing above
   them: no core internals, no policies, no store.
Prints every violation with its file and line; exits 1 when there is one.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "include" / "distlock"
STORES = ["memory", "redis", "etcd", "zookeeper", "postgres", "dynamodb"]
VOCABULARY = {
    "clock.hpp", "error.hpp", "result.hpp", "options.hpp", "owner_token.hpp", "diagnostics.hpp",
    "claim.hpp", "handover.hpp", "observe.hpp", "lock_mode.hpp",
}
INCLUDE = re.compile(r'^\s*#\s*include\s*<distlock/([^>]+)>', re.M)


def includes(path):
    text = path.read_text()
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def store_may_include(store, target):
    if target in VOCABULARY or target == "backend.hpp":
        return True
    if target.startswith((store + "/", "backend/", "transport/", "http/", "http2/", "grpc/", "protobuf/", "aws/",
                          "util/", "policy/")):
        return True
    # A store's own acquisition policy opens the TTL claim, as any policy does.
    return target == "claims/ttl_claim.hpp"


def lower_may_include(target):
    return target in VOCABULARY or target.startswith(("backend/", "util/", "transport/codec.hpp"))


def main():
    problems = []
    for store in STORES:
        for path in sorted((ROOT / store).rglob("*.hpp")):
            rel = path.relative_to(ROOT.parent)
            for line, target in includes(path):
                if not store_may_include(store, target):
                    problems.append(f"{rel}:{line}: store code includes <distlock/{target}>")
            for n, text in enumerate(path.read_text().splitlines(), 1):
                if "distlock::detail" in text:
                    problems.append(f"{rel}:{n}: store code names distlock::detail")
    for folder in ("backend", "util"):
        for path in sorted((ROOT / folder).rglob("*.hpp")):
            rel = path.relative_to(ROOT.parent)
            for line, target in includes(path):
                if not lower_may_include(target):
                    problems.append(f"{rel}:{line}: {folder}/ includes <distlock/{target}> from above it")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) cross a layer (docs/architecture.md, \"Layout\")")
        return 1
    print("layers kept: stores include the tier, transport and codecs; backend/ and util/ include nothing above")
    return 0


if __name__ == "__main__":
    sys.exit(main())
