"""Fails when a relative link in docs/*.md, README.md or a client's or example's README points at a file or a heading that
does not exist. Anchors are GitHub's: the heading lowercased, punctuation dropped, spaces
turned into hyphens, duplicates numbered.

Usage: python3 test/docs/check_links.py   (from the repository root)
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parents[2]
pages = (sorted(root.glob("docs/*.md")) + [root / "README.md"] +
         sorted(root.glob("clients/*/README.md")) + sorted(root.glob("examples/*/README.md")))
link = re.compile(r"\]\(([^)\s]+)\)")  # the text may wrap onto earlier lines
fence = re.compile(r"^\s*```")


def anchors(path):
    seen, out, in_code = {}, set(), False
    for line in path.read_text().splitlines():
        if fence.match(line):
            in_code = not in_code
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*$", line)
        if in_code or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(2).replace("`", "").lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


bad = []
for page in pages:
    in_code = False
    for no, line in enumerate(page.read_text().splitlines(), 1):
        if fence.match(line):
            in_code = not in_code
        if in_code:
            continue
        for target in link.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                bad.append(f"{page.relative_to(root)}:{no}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{page.relative_to(root)}:{no}: {target}: no such heading")
for b in bad:
    print(b)
print(f"{len(bad)} broken links in {len(pages)} pages")
sys.exit(1 if bad else 0)
