#!/usr/bin/env bash
# The operator tool, bin/relaybus, on the suite's cluster (PGHOST/PGPORT/PGUSER), in
# databases of its own: --version and the help of every command; an unknown option and an
# unknown command (exit 2, one line naming them, a pointer to --help, no connection made);
# libpq's PG* variables as the connection when there is no --db; stats and dead list as
# JSON with the values of a known state; `dead requeue EVENT_ID HANDLER` requeueing that
# delivery and no other; pause, resume and cancel; and the errors that say what to do: no extension in the database,
# a role without the admin right (the grant_rights to run, which works as printed; a
# NOINHERIT member of a role with it; on relaybus 0.2.0 the GRANT of relaybus_admin, and an
# admin right given in another database does not count), a server that is not there.
set -euo pipefail
cd "$(dirname "$0")/../.."

make -s client
cli=bin/relaybus
bench=bin/relaybus-bench
db=relaybus_it_cli
noext=relaybus_it_cli_noext
latin1=relaybus_it_cli_latin1
v020=relaybus_it_cli_v020
role=relaybus_it_cli_publisher
team=relaybus_it_cli_team
# A database and a role whose names need quoting, for the hints that paste them.
odd_db="relaybus_it_cli_\"no'ext"
odd_role="relaybus_it_cli_\"o'dd"
odd_db_ident="\"relaybus_it_cli_\"\"no'ext\""
odd_role_ident="\"relaybus_it_cli_\"\"o'dd\""
export PGDATABASE=$db
. test/integration/lib/checks.bash
out=$(mktemp -d /tmp/relaybus-it-cli-XXXXXX)

admin() { PGOPTIONS="-c client_min_messages=warning" psql -qXAt -v ON_ERROR_STOP=1 -d postgres -c "$1" >/dev/null; }
cleanup() {
  admin "DROP DATABASE IF EXISTS $db" || true
  admin "DROP DATABASE IF EXISTS $noext" || true
  admin "DROP DATABASE IF EXISTS $latin1" || true
  admin "DROP DATABASE IF EXISTS $v020" || true
  admin "DROP ROLE IF EXISTS $role" || true
  admin "DROP ROLE IF EXISTS $team" || true
  admin "DROP DATABASE IF EXISTS $odd_db_ident" || true
  admin "DROP ROLE IF EXISTS $odd_role_ident" || true
  rm -rf "$out"
}
trap cleanup EXIT
admin "DROP DATABASE IF EXISTS $db"
admin "DROP DATABASE IF EXISTS $noext"
admin "DROP DATABASE IF EXISTS $latin1"
admin "DROP DATABASE IF EXISTS $v020"
admin "DROP ROLE IF EXISTS $role"
admin "DROP ROLE IF EXISTS $team"
admin "DROP DATABASE IF EXISTS $odd_db_ident"
admin "DROP ROLE IF EXISTS $odd_role_ident"
admin "CREATE DATABASE $db"
admin "CREATE DATABASE $noext"
q "CREATE EXTENSION relaybus" >/dev/null
admin "CREATE ROLE $role LOGIN"
q "SELECT relaybus.grant_rights('$role', 'publisher')" >/dev/null

# run NAME ARGS...: runs the tool; its exit code in $code, its output in $out/NAME.{out,err}.
run() {
  local name=$1
  shift
  code=0
  "$@" >"$out/$name.out" 2>"$out/$name.err" || code=$?
}
# expect DESCRIPTION CODE NAME [TEXT...]: exit code CODE, and stderr (or for code 0 stdout)
# holds every TEXT.
expect() {
  local what=$1 want=$2 name=$3 file
  shift 3
  file=$out/$name.err
  [ "$want" = 0 ] && file=$out/$name.out
  if [ "$code" != "$want" ]; then
    not_ok "$what (exit $code, expected $want: $(head -c 400 "$out/$name.err"))"
    return
  fi
  for text in "$@"; do
    if ! grep -qF -- "$text" "$file"; then
      not_ok "$what (no \"$text\" in: $(head -c 400 "$file"))"
      return
    fi
  done
  ok "$what"
}
# json NAME PYTHON: ok when the Python expression, with `doc` the JSON on NAME's stdout, holds.
json() {
  /usr/bin/python3 -c "import json, sys; doc = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" \
    "$out/$1.out"
}

# --- version and help
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" relaybus.control)
run version $cli --version
expect "--version prints relaybus.control's default_version" 0 version "relaybus $version"
[ "$(cat "$out/version.out")" = "relaybus $version" ] && ok "--version prints that line only" \
  || not_ok "--version prints that line only (got: $(cat "$out/version.out"))"

run help $cli --help
expect "--help lists every command" 0 help "usage: relaybus COMMAND" setup subscribe unsubscribe \
  stats list "show EVENT_ID [HANDLER]" counters "dead list" "dead requeue [EVENT_ID HANDLER]" maintain
for command in setup subscribe unsubscribe stats list show counters "dead list" "dead requeue" maintain; do
  # shellcheck disable=SC2086 # the words of the command are separate arguments
  run help-cmd $cli $command --help
  expect "relaybus $command --help shows its usage and options" 0 help-cmd \
    "usage: relaybus $command" "--db CONN" "--help"
done
run help-dead $cli dead --help
expect "relaybus dead --help lists its subcommands" 0 help-dead "dead list" "dead requeue"
run help-json $cli stats --help
expect "stats --help documents --json" 0 help-json "--json"
# --help stands on its own: it documents what it says (--json's fields included) and sends
# nobody to a file of the repository.
standalone=yes
for command in "" setup subscribe unsubscribe pause resume cancel stats list show counters \
  "dead list" "dead requeue" maintain; do
  # shellcheck disable=SC2086 # the words of the command are separate arguments
  if $cli $command --help | grep -q "docs/\|\.md\b"; then standalone="no: relaybus $command --help"; fi
done
[ "$standalone" = yes ] && ok "no --help points at a repository path" || not_ok "$standalone points at one"

# --- the manual page: make cli-install installs it next to the tool
rm -rf "$out/dest"
if make -s cli-install DESTDIR="$out/dest" PREFIX=/usr >/dev/null 2>"$out/install.err" \
   && [ -x "$out/dest/usr/bin/relaybus" ]; then
  ok "make cli-install installs the tool (DESTDIR, PREFIX)"
else not_ok "make cli-install: $(cat "$out/install.err")"; fi
page=$out/dest/usr/share/man/man1/relaybus.1
if [ -f "$page" ] && grep -q '^\.TH RELAYBUS "1"' "$page" && grep -q 'relaybus list' "$page" \
   && grep -q 'relaybus dead requeue' "$page" && grep -q -- '--every-s' "$page"; then
  ok "... and its manual page, man1/relaybus.1, every command's options in it"
else not_ok "no manual page in $out/dest/usr/share/man/man1 (or it lacks the commands)"; fi
if command -v groff >/dev/null && ! groff -man -Tutf8 -ww -z "$page" 2>&1 | grep -q .; then
  ok "... which groff reads without a warning"
elif ! command -v groff >/dev/null; then ok "... (groff is not installed: not rendered) # SKIP"
else not_ok "groff warns: $(groff -man -Tutf8 -ww -z "$page" 2>&1 | head -3)"; fi

# --- usage errors: exit 2, one line, nothing connects (PGHOST points nowhere)
run unknown-option env PGHOST=/nonexistent $cli stats --frobnicate
expect "an unknown option exits 2 naming it, with a pointer to --help" 2 unknown-option \
  "unknown option --frobnicate" "relaybus stats --help"
[ "$(wc -l <"$out/unknown-option.err")" = 1 ] && ok "the unknown option's message is one line" \
  || not_ok "the unknown option's message is one line ($(wc -l <"$out/unknown-option.err") lines)"
run abbreviated env PGHOST=/nonexistent $cli dead list --hand mailer
expect "an abbreviated option is an unknown option" 2 abbreviated "unknown option --hand"
run unknown-command env PGHOST=/nonexistent $cli frobnicate --db x
expect "an unknown command exits 2 naming it, with a pointer to --help" 2 unknown-command \
  "unknown command 'frobnicate'" "relaybus --help"
[ "$(wc -l <"$out/unknown-command.err")" = 1 ] && ok "the unknown command's message is one line" \
  || not_ok "the unknown command's message is one line"
run unknown-sub env PGHOST=/nonexistent $cli dead frobnicate
expect "an unknown subcommand exits 2 naming it" 2 unknown-sub "unknown subcommand 'frobnicate'"
run bench env PGHOST=/nonexistent $cli bench drain
expect "the old bench command points at relaybus-bench" 2 bench "unknown command 'bench'" \
  "relaybus-bench"
run missing env PGHOST=/nonexistent $cli subscribe --types t
expect "a missing required option exits 2 naming it" 2 missing "'--handler' is required"
run bad-value env PGHOST=/nonexistent $cli dead list --limit many
expect "a value of the wrong type exits 2 naming the option" 2 bad-value "--limit"
run negative-limit env PGHOST=/nonexistent $cli dead list --limit -1
expect "a negative --limit is a usage error" 2 negative-limit "--limit must be at least 0, not -1"
run zero-attempts env PGHOST=/nonexistent $cli subscribe --handler h --types t --max-attempts 0
expect "--max-attempts 0 is a usage error" 2 zero-attempts \
  "--max-attempts must be at least 1, not 0"
run one-word env PGHOST=/nonexistent $cli dead requeue e1
expect "dead requeue with EVENT_ID alone exits 2" 2 one-word "EVENT_ID and HANDLER"
run stray env PGHOST=/nonexistent $cli stats extra
expect "a stray argument exits 2 naming it" 2 stray "unexpected argument 'extra'"
run every-zero env PGHOST=/nonexistent $cli maintain --every-s 0
expect "maintain --every-s 0 is refused, saying how to run once" 2 every-zero \
  "--every-s must be more than 0 seconds; leave it out to run once"
run db-no-command env PGHOST=/nonexistent $cli --db x
expect "--db before no command exits 2" 2 db-no-command "a command is needed after --db"
run unknown-first env PGHOST=/nonexistent $cli --frobnicate stats
expect "an unknown option before the command exits 2 naming it" 2 unknown-first \
  "unknown option --frobnicate"

# --- the PG* variables are the connection when there is no --db (PGDATABASE=$db here)
run subscribe $cli subscribe --handler mailer --types order.placed,order.paid --max-attempts 5
expect "subscribe without --db works on PGDATABASE's database" 0 subscribe "subscribed mailer"
check "the subscription landed in $db, with its max attempts" \
  "SELECT max_attempts = 5 AND event_types = ARRAY['order.placed', 'order.paid']
     FROM relaybus.subscriptions WHERE handler = 'mailer'"
# Two events of a misspelled type while only mailer is subscribed: stored for no handler,
# and stats lists the type (audit, subscribed next, takes every type).
q "SET relaybus.unrouted_publish = ignore;
   SELECT relaybus.publish('order.plcaed', '{}'), relaybus.publish('order.plcaed', '{}')" >/dev/null
run subscribe-audit $cli subscribe --handler audit --types '*'
expect "a second handler for every type" 0 subscribe-audit "subscribed audit"
run setup $cli setup
expect "setup without --db reports the version installed in PGDATABASE's database" 0 setup \
  "relaybus $version is installed in database \"$db\""

# A known state: e1 (keyed) and e2 dead for mailer, e3 pending for mailer; all three pending
# for audit.
q "SELECT relaybus.publish('order.placed', '{\"n\": 1}', key => 'k1', event_id => 'e1')" >/dev/null
q "SELECT relaybus.publish('order.paid', '{\"n\": 2}', event_id => 'e2')" >/dev/null
check "a worker buries the two deliveries of mailer it claims" \
  "SELECT count(*) FILTER (WHERE relaybus.bury(lease_token, 'boom: ' || event_id)) = 2
     FROM relaybus.claim('cli-test', 10, '30 seconds', ARRAY['mailer'])"
q "SELECT relaybus.publish('order.placed', '{\"n\": 3}', event_id => 'e3')" >/dev/null

run stats $cli stats --json
if [ "$code" = 0 ] && json stats '
    sorted(doc) == ["handlers", "unrouted"]
    and doc["unrouted"] == [{"type": "order.plcaed", "events": 2}]
    and {h["handler"]: (h["pending"], h["processing"], h["dead"], h["completed"])
         for h in doc["handlers"]} == {"mailer": (1, 0, 2, 0), "audit": (3, 0, 0, 0)}
    and all(sorted(h) == ["completed", "completed_recorded", "dead", "handler", "oldest_pending",
                          "oldest_pending_age_s", "paused", "pending", "processing"]
            and h["paused"] is False and h["completed_recorded"] is False
            and isinstance(h["oldest_pending_age_s"], int) and 0 <= h["oldest_pending_age_s"] < 600
            for h in doc["handlers"])
    and all(isinstance(h["oldest_pending"], str) and h["oldest_pending"].endswith("Z")
            for h in doc["handlers"])'; then
  ok "stats --json is one document with each handler's counts and the types stored for no handler"
else
  not_ok "stats --json is one document with each handler's counts: $(cat "$out/stats.out" "$out/stats.err")"
fi
run stats-human $cli stats
expect "stats prints a table by default" 0 stats-human "handler | pending | processing" "(2 rows)"
expect "stats lists the event types stored for no handler" 0 stats-human \
  "events stored for no handler (no subscription matches their type):" "order.plcaed | 2"
# The completion history is off in this cluster (the default): completed is not claimed to
# be 0, and the oldest pending delivery shows as an age.
expect "stats: completed is 'not recorded' while the history is off, the oldest pending an age" 0 \
  stats-human "oldest_pending_age" "not recorded" \
  "completed: not recorded while relaybus.completion_history is off"
if grep -Eq '^audit +\| 3 +\| 0 +\| 0 +\| not recorded +\| [0-9]+s +\| no' "$out/stats-human.out"; then
  ok "... audit's row: 3 pending, its oldest some seconds old"
else not_ok "... audit's row: $(grep '^audit' "$out/stats-human.out")"; fi
# The setting applies in the completing session: on for a worker's role only (not for the
# tool's), the history is recorded, and stats says so.
admin "ALTER ROLE $role SET relaybus.completion_history = true"
run stats-role-history $cli stats --json
if [ "$code" = 0 ] && json stats-role-history 'all(h["completed_recorded"] is True for h in doc["handlers"])'; then
  ok "stats: completed is recorded when a role has relaybus.completion_history on (ALTER ROLE)"
else not_ok "stats with the history on for a role: $(cat "$out/stats-role-history.out" "$out/stats-role-history.err")"; fi
run stats-role-history-human $cli stats
if [ "$code" = 0 ] && grep -Eq '^audit +\| 3 +\| 0 +\| 0 +\| 0 +\|' "$out/stats-role-history-human.out" \
   && ! grep -q "not recorded" "$out/stats-role-history-human.out"; then
  ok "... and its table shows the count"
else not_ok "... its table: $(cat "$out/stats-role-history-human.out")"; fi
admin "ALTER ROLE $role RESET relaybus.completion_history"
# Global options before the command (issue 34): the same as after it.
run global-db $cli --db "dbname=$db" stats --json
expect "relaybus --db CONN stats works" 0 global-db '"handler":"audit"'
run global-db-eq $cli --db="dbname=$db" --verbose dead list --handler mailer
expect "relaybus --db=CONN --verbose dead list works" 0 global-db-eq "(2 rows)"

run dead $cli dead list --json --handler mailer
if [ "$code" = 0 ] && json dead '
    sorted(doc) == ["deliveries"]
    and [(d["event_id"], d["handler"], d["type"], d["key"], d["status"], d["attempts"], d["last_error"])
         for d in doc["deliveries"]]
        == [("e2", "mailer", "order.paid", None, "dead", 1, "boom: e2"),
            ("e1", "mailer", "order.placed", "k1", "dead", 1, "boom: e1")]
    and all(d["created_at"].endswith("Z") for d in doc["deliveries"])'; then
  ok "dead list --json lists mailer's two dead letters, newest first, with their fields"
else
  not_ok "dead list --json lists mailer's two dead letters: $(cat "$out/dead.out" "$out/dead.err")"
fi
run dead-empty $cli dead list --json --handler audit
if [ "$code" = 0 ] && json dead-empty 'doc == {"deliveries": []}'; then
  ok "dead list --json of a handler without dead letters is an empty list"
else
  not_ok "dead list --json of a handler without dead letters: $(cat "$out/dead-empty.out")"
fi

# --- dead requeue EVENT_ID HANDLER: that delivery, and no other
run requeue $cli dead requeue e1 mailer
expect "dead requeue e1 mailer requeues one delivery" 0 requeue "requeued 1"
check "e1 for mailer is pending again with a fresh budget" \
  "SELECT status = 'pending' AND attempts = 0 FROM relaybus.list_deliveries(NULL, 'mailer')
    WHERE event_id = 'e1'"
check "e2 for mailer is still dead, and audit's deliveries are untouched" \
  "SELECT (SELECT status = 'dead' AND attempts = 1 FROM relaybus.list_deliveries(NULL, 'mailer')
            WHERE event_id = 'e2')
      AND (SELECT count(*) = 3 AND bool_and(status = 'pending' AND attempts = 0)
             FROM relaybus.list_deliveries(NULL, 'audit'))"
run requeue-again $cli dead requeue e1 mailer
expect "requeueing a delivery that is not dead exits 1 and says so" 1 requeue-again \
  'event "e1" has no dead delivery to handler "mailer"' "relaybus dead list --handler=mailer"
check "... and changes nothing" \
  "SELECT status = 'pending' AND attempts = 0 FROM relaybus.list_deliveries(NULL, 'mailer')
    WHERE event_id = 'e1'"
run requeue-all $cli dead requeue --handler mailer --json
if [ "$code" = 0 ] && json requeue-all 'doc == {"requeued": 1}'; then
  ok "dead requeue --handler mailer --json requeues the one dead letter left"
else
  not_ok "dead requeue --handler mailer --json: $(cat "$out/requeue-all.out" "$out/requeue-all.err")"
fi

# --- list, show and counters, on a handler of their own: l1 due now, l2 due in an hour, l3
# in flight (claimed by worker cli-l), l4 dead
q "SELECT relaybus.subscribe('lister', ARRAY['l.t'])" >/dev/null
q "SELECT relaybus.publish('l.t', '{\"n\": 3}', event_id => 'l3')" >/dev/null
check "worker cli-l holds l3" \
  "SELECT array_agg(event_id) = ARRAY['l3'] FROM relaybus.claim('cli-l', 10, '5 minutes', ARRAY['lister'])"
q "SELECT relaybus.publish('l.t', '{\"n\": 4}', event_id => 'l4')" >/dev/null
check "a worker buries l4" \
  "SELECT bool_and(relaybus.bury(lease_token, 'bad l4')) FROM relaybus.claim('cli-l2', 10, '30 s', ARRAY['lister'])"
q "SELECT relaybus.publish('l.t', '{\"n\": 1}', event_id => 'l1')" >/dev/null
q "SELECT relaybus.publish('l.t', '{\"n\": 2}', event_id => 'l2', available_at => now() + interval '1 hour')" >/dev/null
run list $cli list --handler lister --json
if [ "$code" = 0 ] && json list '
    sorted((d["event_id"], d["state"], d["attempts"], d["worker"]) for d in doc["deliveries"])
    == [("l1", "pending", 0, None), ("l2", "delayed", 0, None), ("l3", "in_flight", 0, "cli-l")]
    and all(isinstance(d["age_s"], int) and 0 <= d["age_s"] < 600 for d in doc["deliveries"])
    and [d["event_id"] for d in doc["deliveries"]] == ["l3", "l1", "l2"]'; then
  ok "list --json: pending, delayed and in flight, with ages and the worker, the oldest first"
else not_ok "list --json: $(cat "$out/list.out" "$out/list.err")"; fi
run list-delayed $cli list --handler lister --state delayed --json
if [ "$code" = 0 ] && json list-delayed '[d["event_id"] for d in doc["deliveries"]] == ["l2"]'; then
  ok "list --state delayed lists only what is due later"
else not_ok "list --state delayed: $(cat "$out/list-delayed.out" "$out/list-delayed.err")"; fi
run list-human $cli list --handler lister
expect "list prints a table: states, ages, when due, the worker" 0 list-human \
  "handler | event_id | type | key | state" "in flight" "delayed" "in 59m" "| now " "cli-l" "(3 rows)"
run list-all $cli list
expect "list without --handler lists every handler's, by handler" 0 list-all "audit" "lister" "mailer"
run list-bad-state env PGHOST=/nonexistent $cli list --state stuck
expect "list --state with an unknown state exits 2" 2 list-bad-state \
  "--state must be pending, delayed or in-flight, not 'stuck'"

run show $cli show l3 --json
if [ "$code" = 0 ] && json show '
    doc["event"]["id"] == "l3" and doc["event"]["type"] == "l.t" and doc["event"]["payload"] == {"n": 3}
    and doc["event"]["published_at"].endswith("Z")
    and [(d["handler"], d["state"], d["attempts"], d["worker"]) for d in doc["deliveries"]]
        == [("audit", "pending", 0, None), ("lister", "in_flight", 0, "cli-l")]'; then
  ok "show EVENT_ID --json: the payload, and each handler's delivery"
else not_ok "show --json: $(cat "$out/show.out" "$out/show.err")"; fi
run show-dead $cli show l4 lister
expect "show EVENT_ID HANDLER: that delivery, dead, with its last error and the payload" 0 show-dead \
  'payload:      {"n": 4}' "dead" "bad l4" "(1 rows)"
run show-none $cli show nosuch
expect "show of an event that does not exist exits 1, saying so" 1 show-none \
  'event "nosuch" not found'
run counters $cli counters --json
if [ "$code" = 0 ] && json counters '
    doc["since"].endswith("Z") and doc["counters"]["published"] >= 4
    and all(isinstance(v, int) for v in doc["counters"].values())'; then
  ok "counters --json: relaybus.counters() by name"
else not_ok "counters --json: $(cat "$out/counters.out" "$out/counters.err")"; fi
run counters-human $cli counters
expect "counters prints a table and since when it counts" 0 counters-human "published" \
  "counting since"

# --- a server error in the tool's style: message, SQLSTATE and hint; the PL/pgSQL CONTEXT
# (internal function names) only with --verbose
run requeue-nobody $cli dead requeue --handler nobody
expect "a server error: its message and SQLSTATE" 1 requeue-nobody \
  "relaybus: handler \"nobody\" is not subscribed and has no deliveries (SQLSTATE 42704)"
if grep -q "CONTEXT\|PL/pgSQL\|ERROR:" "$out/requeue-nobody.err"; then
  not_ok "... and no CONTEXT, PL/pgSQL or ERROR: prefix: $(cat "$out/requeue-nobody.err")"
else ok "... and no CONTEXT, PL/pgSQL or ERROR: prefix"; fi
run requeue-nobody-verbose $cli dead requeue --handler nobody --verbose
expect "--verbose shows the server's CONTEXT too" 1 requeue-nobody-verbose "(SQLSTATE 42704)" "CONTEXT:"

# --- maintain says what it purged in PostgreSQL's words
run maintain $cli maintain
expect "maintain once: lanes taken over and expired rows purged" 0 maintain \
  "maintain: " " lanes taken over, " " expired rows purged"
if grep -q documents "$out/maintain.out"; then not_ok "... not documents"; else ok "... not documents"; fi

# --- pause, resume and cancel, on a handler of their own (audit gets these events too)
q "SELECT relaybus.subscribe('pausable', ARRAY['p.t'])" >/dev/null
q "SELECT relaybus.publish('p.t', '{}', key => 'pk', event_id => 'p1')" >/dev/null
q "SELECT relaybus.publish('p.t', '{}', key => 'pk', event_id => 'p2')" >/dev/null
run pause $cli pause pausable
expect "pause HANDLER prints what it did" 0 pause "paused pausable"
run pause-again $cli pause --handler pausable
expect "pausing again (--handler, the older spelling) says so, and succeeds" 0 pause-again \
  "pausable was paused already"
run pause-both $cli pause pausable --handler pausable
expect "HANDLER and --handler both: exit 2, saying so" 2 pause-both "HANDLER or --handler, not both"
run pause-none $cli pause
expect "no handler: exit 2, saying what is missing" 2 pause-none "pause needs the HANDLER"
run resume-two $cli resume pausable other
expect "two handlers: exit 2" 2 resume-two "unexpected argument 'other'"
check "the handler is paused, and a claim of it hands out nothing" \
  "SELECT paused AND NOT EXISTS (SELECT 1 FROM relaybus.claim('cli-p', 10, '30 s', ARRAY['pausable']))
     FROM relaybus.statistics() WHERE handler = 'pausable'"
run stats-paused $cli stats --json
if [ "$code" = 0 ] && json stats-paused '
    {h["handler"]: h["paused"] for h in doc["handlers"]}["pausable"] is True'; then
  ok "stats --json shows the pause"
else not_ok "stats --json shows the pause: $(cat "$out/stats-paused.out")"; fi
run pause-nobody $cli pause --handler nobody
expect "pausing an unsubscribed handler exits 1" 1 pause-nobody "not subscribed"
run resume $cli resume --handler pausable
expect "resume prints what it did" 0 resume "resumed pausable"
run resume-again $cli resume --handler pausable
expect "resuming again says so" 0 resume-again "pausable was not paused"
run cancel $cli cancel p1 pausable
expect "cancel removes p1" 0 cancel "cancelled p1 for pausable"
check "p1 is gone and p2, behind it on key pk, is claimed now" \
  "SELECT NOT EXISTS (SELECT 1 FROM relaybus.list_deliveries(NULL, 'pausable') WHERE event_id = 'p1')
      AND (SELECT array_agg(event_id) FROM relaybus.claim('cli-p', 10, '30 s', ARRAY['pausable'])) = ARRAY['p2']"
run cancel-busy $cli cancel p2 pausable
expect "cancel of a delivery in flight exits 1, saying so" 1 cancel-busy "is in flight"
run cancel-none $cli cancel p1 pausable
expect "cancel of no delivery exits 1, saying so" 1 cancel-none "nothing cancelled"
run cancel-one $cli cancel p1
expect "cancel with EVENT_ID alone exits 2" 2 cancel-one "EVENT_ID and HANDLER"

# --- a hint's command line quotes the handler for the shell (issue 32, finding 4): pasted,
# it passes the name as one argument and runs nothing else
hostile="y'); DROP TABLE x; --\$(touch $out/ran)"
q "SELECT relaybus.subscribe(\$h\$$hostile\$h\$, ARRAY['hostile.t'])" >/dev/null
# hinted NAME: the command line in NAME's hint, up to where the prose starts.
hinted() { sed -n 's/^hint: \(relaybus dead list --handler=.*\) lists .*/\1/p' "$out/$1.err"; }
for c in cancel requeue; do
  if [ $c = cancel ]; then run hostile-$c $cli cancel e1 "$hostile"
  else run hostile-$c $cli dead requeue e1 "$hostile"; fi
  expect "$c of nothing for a handler named $hostile: exit 1, the hint quotes it" 1 hostile-$c \
    "relaybus dead list --handler='y'\\''); DROP TABLE x; --\$(touch $out/ran)' lists"
  words=$(hinted hostile-$c)
  if [ -n "$words" ] && eval "set -- $words" && [ $# = 4 ] && [ "$4" = "--handler=$hostile" ] \
     && ! [ -e "$out/ran" ]; then
    ok "... and read by a shell that command line passes the name as one argument, running nothing"
    run hinted-$c $cli "${@:2}"
    expect "... and the tool runs it (dead list of that handler)" 0 hinted-$c "(0 rows)"
  else not_ok "... and read by a shell that command line passes the name as one argument (got: $words)"; fi
done

# --- the table shows no byte a terminal acts on: publishers choose type, key and event id,
# handlers write last_error (an escape sequence, a bell, DEL, a C1 control, U+2028/9)
run subscribe-tty $cli subscribe --handler tty --types tty.test
expect "a handler for the terminal test" 0 subscribe-tty "subscribed tty"
q "SELECT relaybus.publish('tty.test', '{}', key => 'k' || chr(1) || chr(127) || '\\',
     event_id => 'e' || chr(133) || chr(8232) || chr(8233) || chr(233) || chr(27) || '[2J')" >/dev/null
check "tty's worker buries it with an error full of control characters" \
  "SELECT bool_and(relaybus.bury(lease_token, 'err' || chr(27) || ']0;x' || chr(7) || E'\\n' || chr(155)))
     FROM relaybus.claim('cli-test', 10, '30 seconds', ARRAY['tty'])"
run tty $cli dead list --handler tty
expect "dead list shows them escaped" 0 tty 'e\u0085\u2028\u2029'"$(printf '\303\251')"'\x1B[2J' \
  'k\x01\x7F\\' 'err\x1B]0;x\x07\n\u009B'
if /usr/bin/python3 -c '
import re, sys
data = open(sys.argv[1], "rb").read()
sys.exit(1 if re.search(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]", data) else 0)' \
  "$out/tty.out"; then ok "... and not one of them raw"; else
  not_ok "... and not one of them raw: $(od -c "$out/tty.out" | head -20)"; fi

# --- a LATIN1 database: the tool talks UTF-8 to it (client_encoding), so its text comes out
# right and an EVENT_ID on the command line matches (chr(233) is é in either encoding)
admin "CREATE DATABASE $latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
PGDATABASE=$latin1 q "CREATE EXTENSION relaybus" >/dev/null
PGDATABASE=$latin1 q "SELECT relaybus.subscribe('h' || chr(233), ARRAY['t'])" >/dev/null
PGDATABASE=$latin1 q "SELECT relaybus.publish('t', '{}', event_id => chr(233) || '1')" >/dev/null
PGDATABASE=$latin1 check "a worker buries it in the LATIN1 database" \
  "SELECT bool_and(relaybus.bury(lease_token, chr(233) || 'chec'))
     FROM relaybus.claim('cli-test', 10, '30 seconds', ARRAY['h' || chr(233)])"
run latin1-dead $cli dead list --json --db "dbname=$latin1"
if [ "$code" = 0 ] && json latin1-dead '
    [(d["event_id"], d["handler"], d["last_error"]) for d in doc["deliveries"]]
    == [("\u00e91", "h\u00e9", "\u00e9chec")]'; then
  ok "dead list --json of a LATIN1 database has its text as it is"
else
  not_ok "dead list --json of a LATIN1 database: $(cat "$out/latin1-dead.out" "$out/latin1-dead.err")"
fi
run latin1-requeue $cli dead requeue "$(printf '\303\251')1" "h$(printf '\303\251')" --db "dbname=$latin1"
expect "dead requeue é1 hé finds it in the LATIN1 database" 0 latin1-requeue "requeued 1"
PGDATABASE=$latin1 check "... and it is pending again" \
  "SELECT status = 'pending' FROM relaybus.list_deliveries(NULL, 'h' || chr(233))
    WHERE event_id = chr(233) || '1'"

# --- output that cannot be written is a failure: exit 1, and why on stderr
write_fails() {  # NAME REDIRECT ARGS...: runs ARGS with stdout to /dev/full or closed
  local name=$1 where=$2
  shift 2
  code=0
  if [ "$where" = full ]; then "$@" >/dev/full 2>"$out/$name.err" || code=$?
  else "$@" >&- 2>"$out/$name.err" || code=$?; fi
}
write_fails full-stats full $cli stats --json
expect "stats --json to a full disk exits 1 and says why" 1 full-stats \
  "relaybus: cannot write output: No space left on device"
write_fails full-dead full $cli dead list
expect "dead list to a full disk exits 1" 1 full-dead "relaybus: cannot write output:"
write_fails full-help full $cli --help
expect "--help to a full disk exits 1" 1 full-help "relaybus: cannot write output:"
write_fails closed-version closed $cli --version
expect "--version to a closed stdout exits 1" 1 closed-version \
  "relaybus: cannot write output: Bad file descriptor"
write_fails full-bench full $bench --help
expect "relaybus-bench --help to a full disk exits 1" 1 full-bench \
  "relaybus-bench: cannot write output:"

# --- errors that say what to do
run noext $cli stats --db "dbname=$noext"
expect "a database without the extension: exit 1, CREATE EXTENSION in that database" 1 noext \
  "relaybus is not installed in database \"$noext\"" "CREATE EXTENSION relaybus"
run noadmin $cli stats --db "dbname=$db user=$role"
expect "a role without the admin right: exit 1, the grant_rights to run in that database" 1 noadmin \
  "role \"$role\" lacks relaybus's admin right in database \"$db\"" \
  "run SELECT relaybus.grant_rights('$role', 'admin') in database \"$db\""
run noadmin-setup $cli setup --db "dbname=$db user=$role"
expect "setup needs no admin right" 0 noadmin-setup "is installed in database \"$db\""
# A member of a role with the admin right that does not inherit its privileges: granting
# would change nothing, so the hint is INHERIT.
admin "CREATE ROLE $team NOLOGIN"
q "SELECT relaybus.grant_rights('$team', 'admin')" >/dev/null
admin "ALTER ROLE $role NOINHERIT; GRANT $team TO $role"
run noinherit $cli stats --db "dbname=$db user=$role"
expect "a NOINHERIT member of a role with the admin right: exit 1, INHERIT to run" 1 noinherit \
  "it is a member of $team, which has it, but does not inherit its privileges" \
  "ALTER ROLE \"$role\" INHERIT"
admin "ALTER ROLE $role INHERIT"
run inherit $cli stats --db "dbname=$db user=$role"
expect "inheriting the admin right from a role is having it" 0 inherit "mailer"
admin "REVOKE $team FROM $role"
# The statement the hint prints, run as printed.
grant=$(sed -n "s/.*run \(SELECT relaybus\.grant_rights(.*)\) in database .*/\1/p" "$out/noadmin.err")
q "$grant" >/dev/null || not_ok "the grant_rights the hint printed runs: $grant"
run granted $cli stats --db "dbname=$db user=$role"
expect "after the grant_rights printed the same command works" 0 granted "mailer"
# The same with names that need quoting (issue 32, finding 4): the hints quote them.
admin "CREATE DATABASE $odd_db_ident"
admin "CREATE ROLE $odd_role_ident LOGIN"
run odd-noext env PGDATABASE="$odd_db" $cli stats
expect "a database named $odd_db without the extension: the hint quotes its name" 1 odd-noext \
  "connect to database $odd_db_ident as a superuser"
run odd-noadmin env PGUSER="$odd_role" $cli stats
expect "a role named $odd_role without the admin right: the hint quotes its name" 1 odd-noadmin \
  "run SELECT relaybus.grant_rights('\"relaybus_it_cli_\"\"o''dd\"', 'admin') in database \"$db\";"
grant=$(sed -n "s/.*run \(SELECT relaybus\.grant_rights(.*)\) in database .*/\1/p" "$out/odd-noadmin.err")
q "$grant" >/dev/null || not_ok "the grant_rights the hint printed runs: $grant"
run odd-granted env PGUSER="$odd_role" $cli stats
expect "... and, run as printed, it gives that role the right" 0 odd-granted "mailer"
# On relaybus 0.2.0 the rights are the cluster's roles, and the admin right given in $db
# above means nothing in another database.
admin "CREATE DATABASE $v020"
PGDATABASE=$v020 q "CREATE EXTENSION relaybus VERSION '0.2.0'" >/dev/null
run v020 $cli stats --db "dbname=$v020 user=$role"
expect "on relaybus 0.2.0, without relaybus_admin: exit 1, the GRANT to run" 1 v020 \
  "role \"$role\" lacks relaybus_admin" "GRANT relaybus_admin TO \"$role\""
run noserver env PGPORT=1 $cli stats
expect "no server: exit 1, libpq's message and the variables used" 1 noserver \
  "cannot connect to PostgreSQL" "PGPORT=1" "PGDATABASE=$db"
run noserver-db $cli stats --db "port=1 password=hunter2"
expect "no server with --db: the --db used, its password hidden" 1 noserver-db \
  "cannot connect to PostgreSQL" '--db "password=*** port=1"'
if grep -q hunter2 "$out/noserver-db.err"; then not_ok "the password is never printed"; else
  ok "the password is never printed"; fi

# An unparsable --db: libpq's parse error quotes the text, the password in it included, so
# the message is a fixed one (and the hint shows no part of it either).
n=0
for bad in 'postgresql://ops:TopSecret1@[::1/app' 'postgresql://ops:Top%zzSecret1@/app' \
  'password=Top Secret1 dbname=app'; do
  n=$((n + 1))
  run "unparsed-$n" $cli stats --db "$bad"
  expect "an unparsable --db ($bad): exit 1, a fixed message" 1 "unparsed-$n" \
    "cannot connect to PostgreSQL: --db is not a valid libpq connection string or URI"
  if grep -q Secret1 "$out/unparsed-$n.err"; then
    not_ok "... and its password is not printed: $(cat "$out/unparsed-$n.err")"
  else ok "... and its password is not printed"; fi
  run "unparsed-bench-$n" $bench drain --out "$out/bench" --db "$bad"
  expect "relaybus-bench with that --db: exit 1, a fixed message" 1 "unparsed-bench-$n" \
    "not a valid libpq connection string or URI"
  if grep -q Secret1 "$out/unparsed-bench-$n.err"; then
    not_ok "... and relaybus-bench does not print its password: $(cat "$out/unparsed-bench-$n.err")"
  else ok "... and relaybus-bench does not print its password"; fi
done

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
