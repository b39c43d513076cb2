#!/usr/bin/python3
"""The version lives in one place: relaybus.control's default_version.

The Makefile, the CLI's --version, the client library's file name and soname, and the
.pc files derive from it at build time. The files below are read by tools that never run
our Makefile (PGXN reads META.json, npm package.json and its lock file, pip
pyproject.toml, dpkg-buildpackage debian/changelog and debian/control's library package
name, after the soname), so they carry the version as a literal, and this check fails
`make test` when one of them disagrees with the control file.
Run from the top of the tree: /usr/bin/python3 test/packaging/check_versions.py
"""
import json
import os
import re
import sys


def control_version():
    with open("relaybus.control") as f:
        m = re.search(r"^default_version = '([^']+)'$", f.read(), re.M)
    if not m:
        sys.exit("relaybus.control: no default_version = '...' line")
    return m.group(1)


def first_match(path, pattern, what):
    with open(path) as f:
        m = re.search(pattern, f.read(), re.M)
    return (path + ": " + what, m.group(1) if m else None)


def found(version):
    meta = json.load(open("META.json"))
    lock = json.load(open("clients/node/package-lock.json"))
    yield "META.json: version", meta.get("version")
    for name, ext in sorted(meta.get("provides", {}).items()):
        yield f"META.json: provides.{name}.version", ext.get("version")
        # The file PGXN names as the extension is this version's install script.
        yield (f"META.json: provides.{name}.file names sql/{name}--VERSION.sql",
               (re.fullmatch(rf"sql/{re.escape(name)}--(.+)\.sql", ext.get("file", "")) or [None, None])[1])
    yield "clients/node/package.json: version", json.load(open("clients/node/package.json")).get("version")
    yield "clients/node/package-lock.json: version", lock.get("version")
    yield 'clients/node/package-lock.json: packages[""].version', lock.get("packages", {}).get("", {}).get("version")
    yield first_match("clients/python/pyproject.toml", r'^version = "([^"]+)"$', "[project] version")
    yield first_match("clients/python/relaybus/__init__.py", r'^__version__ = "([^"]+)"$', "__version__")
    # debian/source/format is 3.0 (native): the package version is the upstream version,
    # with no Debian revision, so it must equal the control file's exactly.
    yield first_match("debian/changelog", r"\A\S+ \(([^)]+)\)", "top entry")
    # The library package is named after the soname, which carries major.minor
    # (mk/client-library.mk): librelaybus_client.so.0.2 is librelaybus-client0.2.
    soversion = ".".join(version.split(".")[:2])
    with open("debian/control") as f:
        names = re.findall(r"^Package: librelaybus-client(\d\S*)$", f.read(), re.M)
    yield ("debian/control: the library package librelaybus-clientMAJOR.MINOR (and its .install)",
           version if names == [soversion] and os.path.exists(f"debian/librelaybus-client{soversion}.install")
           else f"librelaybus-client{','.join(names)}")


def main():
    version = control_version()
    bad = 0
    for what, value in found(version):
        if value != version:
            bad += 1
            print(f"version mismatch: {what} is {value!r}, relaybus.control's default_version is {version!r}")
    if bad:
        print(f"versions: {bad} file(s) disagree with relaybus.control; change them to {version}")
        return 1
    print(f"versions: every packaged file says {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
