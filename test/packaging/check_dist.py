#!/usr/bin/python3
"""Validates the PGXN release archive that `make dist` makes, and its META.json.

Debian has no PGXN META validator (only pgxnclient, which installs distributions), so
this is a small one of our own, stdlib only, after the PGXN Meta Spec 1.0.0: the required
keys and their types, semantic versions, the license names, prereqs and resources, and
that custom keys start with x_. On the archive it checks what PGXN and a PGXS build rely
on: one top directory relaybus-VERSION/, META.json, relaybus.control, the Makefile and
every extension script the Makefile installs, and every file and docfile META.json names.

  /usr/bin/python3 test/packaging/check_dist.py [relaybus-0.2.0.zip] [--tree DIR]

--tree also checks DIR/META.json (the work tree's, which may be newer than HEAD's); alone,
it checks only that.
Prints one line per problem and exits 1 if there is any.
"""
import json
import re
import sys
import zipfile

# Semantic Versioning 1.0.0, as the spec requires (2.0.0's build metadata is not allowed).
SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([a-zA-Z][0-9a-zA-Z-]*)?")
LICENSES = {
    "agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2", "bsd", "freebsd",
    "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3", "lgpl_2_1", "lgpl_3_0", "mit",
    "mozilla_1_0", "mozilla_1_1", "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay",
    "sun", "zlib", "open_source", "restricted", "unrestricted", "unknown",
}
REQUIRED = ("name", "abstract", "maintainer", "version", "license", "provides", "meta-spec")
OPTIONAL = ("description", "generated_by", "tags", "no_index", "prereqs", "release_status",
            "resources")
PHASES = ("configure", "build", "runtime", "test", "develop")
RELATIONS = ("requires", "recommends", "suggests", "conflicts")
URL = re.compile(r"https?://[^\s/]+(/\S*)?")
EMAIL = re.compile(r"[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+")


class Problems(list):
    def add(self, where, text):
        self.append(f"{where}: {text}")


def is_str(v):
    return isinstance(v, str) and v.strip() != ""


def check_custom_keys(obj, known, where, problems):
    for key in obj:
        if key not in known and not key.lower().startswith("x_"):
            problems.add(where, f"unknown key {key!r} (custom keys must start with x_)")


def check_version_range(text, where, problems):
    if text == "0" or (isinstance(text, str) and SEMVER.fullmatch(text)):
        return
    if not isinstance(text, str):
        problems.add(where, f"a version range must be a string, not {text!r}")
        return
    for part in text.split(","):
        m = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*", part)
        if not m or not SEMVER.fullmatch(m.group(2)):
            problems.add(where, f"{part.strip()!r} is not OP SEMVER (>=, <=, ==, !=, >, <)")


def check_meta(meta, where, problems):
    """The PGXN Meta Spec 1.0.0, for one parsed META.json."""
    if not isinstance(meta, dict):
        problems.add(where, "not a JSON object")
        return
    for key in REQUIRED:
        if key not in meta:
            problems.add(where, f"required key {key!r} is missing")
    check_custom_keys(meta, REQUIRED + OPTIONAL, where, problems)

    name = meta.get("name")
    if not (is_str(name) and len(name) >= 2 and not re.search(r"[\s/\\\x00-\x1f]", name)):
        problems.add(where, f"name {name!r}: two characters or more, no whitespace, / or \\")
    for key in ("abstract", "description", "generated_by"):
        if key in meta and not is_str(meta[key]):
            problems.add(where, f"{key} must be a non-empty string")
    version = meta.get("version")
    if not (isinstance(version, str) and SEMVER.fullmatch(version)):
        problems.add(where, f"version {version!r} is not a semantic version")

    maintainer = meta.get("maintainer")
    people = maintainer if isinstance(maintainer, list) else [maintainer]
    if not people or not all(is_str(p) for p in people):
        problems.add(where, "maintainer must be a string or a non-empty array of strings")
    elif not any(EMAIL.search(p) for p in people):
        problems.add(where, "no maintainer has a contact address (\"name <address>\")")

    lic = meta.get("license")
    if isinstance(lic, str):
        if lic not in LICENSES:
            problems.add(where, f"license {lic!r} is not one of the spec's names")
    elif isinstance(lic, list):
        for item in lic:
            if item not in LICENSES:
                problems.add(where, f"license {item!r} is not one of the spec's names")
    elif isinstance(lic, dict):
        for lname, url in lic.items():
            if not (is_str(lname) and isinstance(url, str) and URL.fullmatch(url)):
                problems.add(where, f"license {lname!r}: the value must be a URL")
    else:
        problems.add(where, "license must be a string, an array or an object")

    provides = meta.get("provides")
    if not (isinstance(provides, dict) and provides):
        problems.add(where, "provides must be a non-empty object")
        provides = {}
    for ext, info in provides.items():
        at = f"{where}: provides.{ext}"
        if not isinstance(info, dict):
            problems.add(at, "must be an object")
            continue
        check_custom_keys(info, ("file", "version", "abstract", "docfile"), at, problems)
        if not is_str(info.get("file")):
            problems.add(at, "file is required (the extension's install script)")
        v = info.get("version")
        if not (isinstance(v, str) and SEMVER.fullmatch(v)):
            problems.add(at, f"version {v!r} is required and must be a semantic version")
        for key in ("abstract", "docfile"):
            if key in info and not is_str(info[key]):
                problems.add(at, f"{key} must be a non-empty string")

    spec = meta.get("meta-spec")
    if not (isinstance(spec, dict) and spec.get("version") == "1.0.0"):
        problems.add(where, "meta-spec must be an object with version \"1.0.0\"")
    elif "url" in spec and not URL.fullmatch(str(spec["url"])):
        problems.add(where, "meta-spec.url must be a URL")

    if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
        problems.add(where, "release_status must be stable, testing or unstable")

    tags = meta.get("tags", [])
    if not (isinstance(tags, list) and all(is_str(t) and len(t) <= 255 and not re.search(r"[/\\\x00-\x1f]", t) for t in tags)):
        problems.add(where, "tags must be an array of strings (at most 255 characters, no / or \\)")

    no_index = meta.get("no_index", {})
    if not isinstance(no_index, dict):
        problems.add(where, "no_index must be an object")
    else:
        check_custom_keys(no_index, ("file", "directory"), f"{where}: no_index", problems)

    prereqs = meta.get("prereqs", {})
    if not isinstance(prereqs, dict):
        problems.add(where, "prereqs must be an object")
        prereqs = {}
    check_custom_keys(prereqs, PHASES, f"{where}: prereqs", problems)
    for phase, relations in prereqs.items():
        if not isinstance(relations, dict):
            problems.add(f"{where}: prereqs.{phase}", "must be an object")
            continue
        check_custom_keys(relations, RELATIONS, f"{where}: prereqs.{phase}", problems)
        for rel, reqs in relations.items():
            if not isinstance(reqs, dict):
                problems.add(f"{where}: prereqs.{phase}.{rel}", "must be an object")
                continue
            for req, rng in reqs.items():
                check_version_range(rng, f"{where}: prereqs.{phase}.{rel}.{req}", problems)

    resources = meta.get("resources", {})
    at = f"{where}: resources"
    if not isinstance(resources, dict):
        problems.add(at, "must be an object")
        resources = {}
    check_custom_keys(resources, ("homepage", "bugtracker", "repository"), at, problems)
    if "homepage" in resources and not URL.fullmatch(str(resources["homepage"])):
        problems.add(at, "homepage must be a URL")
    bug = resources.get("bugtracker", {})
    if not isinstance(bug, dict):
        problems.add(at, "bugtracker must be an object")
    else:
        check_custom_keys(bug, ("web", "mailto"), f"{at}.bugtracker", problems)
        if "web" in bug and not URL.fullmatch(str(bug["web"])):
            problems.add(at, "bugtracker.web must be a URL")
        if "mailto" in bug and not EMAIL.fullmatch(str(bug["mailto"])):
            problems.add(at, "bugtracker.mailto must be an e-mail address")
    repo = resources.get("repository", {})
    if not isinstance(repo, dict):
        problems.add(at, "repository must be an object")
    else:
        check_custom_keys(repo, ("url", "web", "type"), f"{at}.repository", problems)
        for key in ("url", "web"):
            if key in repo and not URL.fullmatch(str(repo[key])):
                problems.add(at, f"repository.{key} must be a URL")
        if "url" in repo and not is_str(repo.get("type")):
            problems.add(at, "repository.type is required with repository.url")


def control_version(text):
    m = re.search(r"^default_version = '([^']+)'$", text, re.M)
    return m.group(1) if m else None


def check_archive(path, problems):
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        problems.add(path, f"not a readable zip ({e})")
        return
    names = [n for n in zf.namelist()]
    tops = sorted({n.split("/", 1)[0] for n in names})
    if len(tops) != 1 or any("/" not in n for n in names):
        problems.add(path, f"must have exactly one top directory, has {tops}")
        return
    top = tops[0]
    files = {n[len(top) + 1:] for n in names if not n.endswith("/")}

    def read(rel):
        return zf.read(f"{top}/{rel}").decode("utf-8")

    for rel in ("META.json", "relaybus.control", "Makefile", "LICENSE", "README.md"):
        if rel not in files:
            problems.add(path, f"{rel} is missing")
    if problems:
        return
    version = control_version(read("relaybus.control"))
    if top != f"relaybus-{version}":
        problems.add(path, f"the top directory is {top!r}, relaybus.control says relaybus-{version}")
    if not path.endswith(f"/{top}.zip") and path != f"{top}.zip":
        problems.add(path, f"the archive's name should be {top}.zip")

    # Every script the Makefile installs (SQL_SCRIPTS), and this version's install script.
    m = re.search(r"^SQL_SCRIPTS\s*=\s*(.+)$", read("Makefile"), re.M)
    scripts = m.group(1).split() if m else []
    if not scripts:
        problems.add(path, "no SQL_SCRIPTS line in the Makefile")
    for rel in scripts + [f"sql/relaybus--{version}.sql"]:
        if rel not in files:
            problems.add(path, f"{rel} is missing (an extension script)")

    leftovers = sorted(f for f in files if re.search(r"\.(o|so|bc|a|d|zip|deb)$", f))
    if leftovers:
        problems.add(path, f"build products in the archive: {leftovers[:5]}")

    try:
        meta = json.loads(read("META.json"))
    except ValueError as e:
        problems.add(path, f"META.json is not valid JSON ({e})")
        return
    check_meta(meta, f"{path}: META.json", problems)
    if isinstance(meta, dict):
        if meta.get("version") != version:
            problems.add(path, f"META.json version {meta.get('version')!r} is not {version!r}")
        for ext, info in (meta.get("provides") or {}).items():
            for key in ("file", "docfile"):
                rel = info.get(key) if isinstance(info, dict) else None
                if rel is not None and rel not in files:
                    problems.add(path, f"provides.{ext}.{key} {rel!r} is not in the archive")
    return len(files)


def main(argv):
    args = argv[1:]
    tree = None
    if "--tree" in args:
        i = args.index("--tree")
        tree = args[i + 1]
        del args[i:i + 2]
    if len(args) > 1 or (not args and tree is None):
        print("usage: check_dist.py [ARCHIVE.zip] [--tree DIR]", file=sys.stderr)
        return 2
    problems = Problems()
    count = check_archive(args[0], problems) if args else None
    if tree is not None:
        where = f"{tree}/META.json"
        try:
            with open(where) as f:
                check_meta(json.load(f), where, problems)
        except ValueError as e:
            problems.add(where, f"not valid JSON ({e})")
    for p in problems:
        print("dist: " + p)
    if problems:
        print(f"dist: {len(problems)} problem(s)")
        return 1
    if args:
        print(f"dist: {args[0]} is a valid PGXN release ({count} files, META.json per meta-spec 1.0.0)")
    else:
        print(f"dist: {tree}/META.json follows meta-spec 1.0.0")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
