"""Replays docs/getting-started.md as a newcomer pastes it (see getting_started.sh).

Usage: getting_started.py DIR PORT WORK   (from the repository root; DIR a new directory
for the guide's cluster, PORT its port, WORK an empty scratch directory)

The code blocks are read from the guide itself, so the guide cannot drift from what is
tested. Only the paths and the port are changed, to DIR, PORT and WORK (the cluster's
directory and port only in the steps that start and stop it: the others must name no
connection of their own), and `sudo` is dropped (as the guide says to do as root). Every block runs with bash from the top of the
checkout, in an environment without any PG* variable of its own: what a block exports
(step 2) is handed to the later ones, as the guide tells a reader to do in a new terminal.
A worker that the guide leaves running is stopped as Ctrl-C would stop it: SIGINT to its
process group. The outputs checked are the ones the guide's prose promises, and each such
promise is checked to be in the prose too. Not replayed: step 1 (install-deps, make, make
install: the suite has built and installed this tree) and 3d (the C++ example, which needs
the runtime installed and is built by test/integration/cpp_runtime.sh).

Prints one TAP-like line per check and exits 1 if any failed.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "getting-started.md"
DIR, PORT, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])

passed = failed = 0


def check(what, condition, detail=""):
    global passed, failed
    if condition:
        passed += 1
        print(f"ok - {what}")
    else:
        failed += 1
        print(f"not ok - {what}" + (f"\n{detail}" if detail else ""))
    return condition


def finish():
    print(f"getting started: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


# The guide: its prose (for the promises) and its code blocks, by the section they are in.
text = GUIDE.read_text()
prose_words = " ".join(re.sub(r"```.*?```", " ", text, flags=re.S).split())
blocks = {}  # "3b" -> [code, ...]
section = None
lines = iter(text.splitlines())
for line in lines:
    heading = re.match(r"## (\w+)\. ", line)
    if line.startswith("## "):
        section = heading.group(1) if heading else None
        continue
    fence = re.match(r"```(\w*)\s*$", line)
    if fence and section:
        code = []
        for inner in lines:
            if inner.startswith("```"):
                break
            code.append(inner)
        blocks.setdefault(section, []).append((fence.group(1), "\n".join(code) + "\n"))

# The cluster's directory and port, replaced only in the steps that start, export and stop
# it (2 and 5): every other step must find the cluster through the PG* variables, and one
# that names it itself is refused below (replaced, it would hide exactly that).
CLUSTER = [("/tmp/relaybus-tour", DIR), ("54330", PORT)]
SUBSTITUTIONS = [
    ("/tmp/mailer.py", str(WORK / "mailer.py")),
    ("/tmp/mailer-node", str(WORK / "mailer-node")),
    ("sudo ", ""),
]


def block(section, cluster=False):
    """The one shell block of `section`, with the paths and sudo replaced (and the
    cluster's directory and port, for a `cluster` step)."""
    found = [code for lang, code in blocks.get(section, []) if lang == "sh"]
    if not check(f"step {section} of the guide has one sh block", len(found) == 1,
                 f"found {len(found)}"):
        finish()
    code = found[0]
    substitutions = SUBSTITUTIONS + (CLUSTER if cluster else [])
    # Either check failing ends the run before the block runs: run as written, it could
    # reach a reader's own cluster of the guide, or write outside WORK.
    if not cluster:
        named = [old for old, _ in CLUSTER if old in code] + re.findall(r"postgres(?:ql)?://\S*", code)
        if not check(f"step {section} names no connection of its own (only the PG* variables)",
                     not named, str(named)):
            finish()
    # A path this test does not redirect would be written outside WORK, or shared with a
    # reader's own try: the substitutions must cover every /tmp path of the block.
    unknown = [path for path in re.findall(r"/tmp/[\w.-]+", code)
               if not any(path.startswith(old) for old, _ in substitutions)]
    if not check(f"step {section}'s /tmp paths are all ones this test redirects", not unknown,
                 str(unknown)):
        finish()
    for old, new in substitutions:
        code = code.replace(old, new)
    return code


def promised(phrase):
    """The guide's prose says `phrase` (white space aside): what is checked is promised."""
    check(f"the guide promises {phrase!r}", " ".join(phrase.split()) in prose_words)


def cells(output):
    """The rows of psql's aligned tables in `output`, as lists of stripped cells."""
    return [[c.strip() for c in line.split("|")] for line in output.splitlines() if "|" in line]


base_env = {k: v for k, v in os.environ.items()
            if not k.startswith("PG") and k not in ("DATABASE_URL", "NODE_DEBUG")}


def run(code, env, what):
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    check(f"{what} exits 0", result.returncode == 0,
          f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result.stdout


def reset_sigint():
    # As in a terminal, SIGINT is not ignored, whatever the test's own caller did.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Foreground:
    """A block whose last command runs until Ctrl-C, in a process group of its own."""

    def __init__(self, code, env, name):
        self.out, self.err = WORK / f"{name}.out", WORK / f"{name}.err"
        self.process = subprocess.Popen(
            ["bash", "-e", "-o", "pipefail", "-c", code], cwd=ROOT, env=env,
            stdout=self.out.open("w"), stderr=self.err.open("w"),
            start_new_session=True, preexec_fn=reset_sigint)

    def output(self):
        return self.out.read_text(), self.err.read_text()

    def wait_for(self, stream, phrase, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if phrase in self.output()[stream] or self.process.poll() is not None:
                break
            time.sleep(0.1)
        return phrase in self.output()[stream]

    def ctrl_c(self, timeout=30):
        """SIGINT to the process group, as the terminal sends it; the exit code."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def psql(env, sql):
    return subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql], env=env,
                          capture_output=True, text=True, check=True).stdout.strip()


# 2. A database with relaybus: starts the cluster; what it exports, later steps get.
env_file = WORK / "step2.env"
run(block("2", cluster=True) + f'env -0 >"{env_file}"\n', base_env,
    "step 2 (cluster, extension, subscribe)")
exported = dict(item.split("=", 1) for item in env_file.read_text().split("\0")
                if item.startswith("PG"))
check("step 2 exports PGHOST, PGPORT, PGUSER and PGDATABASE",
      sorted(exported) == ["PGDATABASE", "PGHOST", "PGPORT", "PGUSER"], str(exported))
env = dict(base_env, **exported)
database = exported.get("PGDATABASE", "")
# One database, served by the background workers: relaybus.database lists it, and its
# maintenance worker runs in it.
served = [d.strip() for d in psql(env, "SHOW relaybus.database").split(",")]
check(f"the guide's database ({database}) is one relaybus.database lists ({served})",
      database in served)
deadline = time.monotonic() + 10
while time.monotonic() < deadline and psql(env, (
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'relaybus maintenance' "
        "AND datname = current_database()")) != "1":
    time.sleep(0.1)
check("relaybus's maintenance worker runs in the guide's database", psql(env, (
    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'relaybus maintenance' "
    "AND datname = current_database()")) == "1")

# 3a. psql: publish, claim, complete.
out = run(block("3a"), env, "step 3a (psql)")
promised('It prints `handling {"order_id": 1}`')
check('3a prints handling {"order_id": 1}', 'handling {"order_id": 1}' in out, out)
promised("`complete` returns `t`")
check("3a: complete returns t", re.search(r"^\s*complete\s*\n-+\n\s*t\s*$", out, re.M), out)
promised("`mailer  |       0 |          0 |    0`")
check("3a: statistics() shows nothing pending for mailer", ["mailer", "0", "0", "0"] in cells(out),
      out)
check("3a: worker-1 holds no lane once it relinquished",
      psql(env, "SELECT count(*) FROM relaybus.lanes WHERE lease_owner = 'worker-1'") == "0")

# 3b. Python, with step 4 while it runs.
step4 = block("4")
python = Foreground(block("3b"), env, "python")
try:
    promised("It logs `INFO:root:mail for order 2` within a second")
    check("3b: the Python worker logs INFO:root:mail for order 2",
          python.wait_for(1, "INFO:root:mail for order 2", 30), "\n".join(python.output()))
    out = run(step4, env, "step 4 with the Python worker")
    promised("`mailer  |        1 | KeyError: 'order_id'` from Python")
    check("4: the Python worker buried the bad event after one attempt",
          ["mailer", "1", "KeyError: 'order_id'"] in cells(out), out)
    promised("The worker logs it as an error")
    check("4: the Python worker logged the burial as an error, with attempts=0",
          re.search(r"^ERROR:relaybus:handler mailer failed on event \S+, attempts=0, and it is "
                    r"dead \(buried\): KeyError: 'order_id'$", python.output()[1], re.M),
          python.output()[1])
    promised("press Ctrl-C to stop it")
    code = python.ctrl_c()
    check("3b: Ctrl-C stops the Python worker, exit 0", code == 0,
          f"exit {code}\n" + "\n".join(python.output()))
    check("3b: the Python worker said it stopped",
          "INFO:relaybus:worker mailer-py stopped" in python.output()[1], python.output()[1])
finally:
    python.kill()

# 3c. Node.js (npm pack, npm install from the registry), with step 4 while it runs.
node = Foreground(block("3c"), env, "node")
try:
    promised("It prints `mail for order 3`")
    check("3c: the Node.js worker prints mail for order 3",
          node.wait_for(0, "mail for order 3", 300), "\n".join(node.output()))
    out = run(step4, env, "step 4 with the Node.js worker")
    promised("`mailer  |        1 | TypeError: order.placed without order_id` from Node.js")
    check("4: the Node.js worker buried the bad event after one attempt",
          ["mailer", "1", "TypeError: order.placed without order_id"] in cells(out), out)
    code = node.ctrl_c()
    check("3c: Ctrl-C stops the Node.js worker, exit 0", code == 0,
          f"exit {code}\n" + "\n".join(node.output()))
finally:
    node.kill()

check("nothing of the guide's is left pending or in flight, and the two bad events are dead",
      psql(env, "SELECT pending || ' ' || processing || ' ' || dead FROM relaybus.statistics() "
                "WHERE handler = 'mailer'") == "0 0 2")
check("the workers handed their lanes back when they stopped",
      psql(env, "SELECT count(*) FROM relaybus.lanes "
                "WHERE lease_owner IN ('mailer-py', 'mailer-node')") == "0")

# 5. Clean up.
run(block("5", cluster=True), env, "step 5 (cluster stop)")
check("step 5 removes the cluster's directory", not os.path.exists(DIR))
finish()
