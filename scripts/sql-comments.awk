# COMMENT ON statements for every object the given sql/parts files CREATE, made from the
# header comment directly above each CREATE, so that what \df+, \dt+ and \di+ show and what
# the source says are one text (scripts/build-sql runs this, then expands the @NAME@
# placeholders in the result as in the parts).
#
# A header is the run of "-- " lines right above its CREATE (a blank line or a rule of
# dashes ends a run). Its first paragraph, up to a line that is only "--", is the comment:
# what the object is or does and what it returns, in one or a few sentences. The later
# paragraphs (tables touched, locks, why it is built so) stay in the source only. A leading
# "name: " or "name(args): " is dropped, since psql shows the name beside the comment.
# A CREATE without a header, or of a kind this does not know, fails the build: every object
# gets a description.
#   awk -f scripts/sql-comments.awk sql/parts/PART.sql...
function die(msg) {
  printf "scripts/sql-comments.awk: %s:%s: %s\n", FILENAME, FNR, msg > "/dev/stderr"
  failed = 1
  exit 1
}
function reset_header() { nlines = 0; in_first = 1 }
function squeeze(s) {
  gsub(/[ \t\n]+/, " ", s)
  sub(/^ /, "", s)
  sub(/ $/, "", s)
  return s
}
# Each header line becomes one string literal; adjacent literals on separate lines are one
# string in SQL, so the generated statement keeps the header's line breaks.
function literal(s) {
  if (index(s, "\\")) die("a backslash in a header comment (not allowed in a COMMENT literal)")
  gsub(/'/, "''", s)
  return "'" s "'"
}
function emit(kind, object, unqualified,    i, first, out) {
  if (nlines == 0) die(kind " " object " has no header comment (the first paragraph becomes its COMMENT)")
  first = header[1]
  if (index(first, unqualified ": ") == 1) {
    first = substr(first, length(unqualified) + 3)
  } else if (match(first, "^" unqualified "\\([^)]*\\): ")) {
    first = substr(first, RLENGTH + 1)
  }
  header[1] = first
  if (header[1] == "") die(kind " " object ": the header's first line is only its name")
  out = "COMMENT ON " kind " " object " IS"
  for (i = 1; i <= nlines; i++) out = out "\n  " literal(header[i] (i < nlines ? " " : ""))
  print out ";"
}
# The argument list of a CREATE FUNCTION as COMMENT ON FUNCTION takes it: the text between
# the outer parentheses, each argument without its DEFAULT. sig_text holds the text from
# the opening parenthesis on; returns "" while the closing one has not been read yet.
function signature(text,    i, c, depth, quoted, arg, args, n, cut) {
  depth = 0; quoted = 0; arg = ""; args = ""; n = 0
  for (i = 1; i <= length(text); i++) {
    c = substr(text, i, 1)
    if (quoted) { if (c == "'") quoted = 0; if (depth == 1) arg = arg c; continue }
    if (c == "'") { quoted = 1; if (depth == 1) arg = arg c; continue }
    if (c == "(") { depth++; if (depth == 1) continue }
    if (c == ")") { depth--; if (depth == 0) break }
    if (c == "," && depth == 1) { args = args (n++ ? ", " : "") strip_default(arg); arg = ""; continue }
    if (depth >= 1) arg = arg c
  }
  if (depth != 0) return ""
  if (squeeze(arg) != "") args = args (n++ ? ", " : "") strip_default(arg)
  return "(" args ")"
}
function strip_default(arg,    cut) {
  arg = squeeze(arg)
  cut = index(toupper(arg), " DEFAULT ")
  if (!cut) cut = index(arg, " = ")
  if (cut) arg = substr(arg, 1, cut - 1)
  return arg
}
function unqualified_name(object) { sub(/^[a-z0-9_]+\./, "", object); return object }

BEGIN { reset_header(); collecting = 0 }
FNR == 1 { reset_header() }

collecting {
  sig_text = sig_text "\n" $0
  sig = signature(sig_text)
  if (sig != "") { emit("FUNCTION", fn_name sig, unqualified_name(fn_name)); collecting = 0; reset_header() }
  next
}

$0 == "--" { in_first = 0; next }
/^-- / { if (in_first) { header[++nlines] = substr($0, 4); sub(/[ \t]+$/, "", header[nlines]) }; next }
/^CREATE / {
  line = $0
  if (match(line, /^CREATE (OR REPLACE )?FUNCTION [a-z0-9_.]+\(/)) {
    fn_name = substr(line, 1, RLENGTH - 1)
    sub(/^CREATE (OR REPLACE )?FUNCTION /, "", fn_name)
    if (fn_name !~ /\./) die("function " fn_name " is not schema-qualified")
    sig_text = substr(line, RLENGTH)
    sig = signature(sig_text)
    if (sig == "") { collecting = 1; next }
    emit("FUNCTION", fn_name sig, unqualified_name(fn_name))
  } else if (match(line, /^CREATE (UNIQUE )?INDEX [a-z0-9_]+ ON [a-z0-9_]+\./)) {
    # An index lives in its table's schema.
    split(line, w, / +/)
    name = (w[2] == "UNIQUE") ? w[4] : w[3]
    schema = substr(line, index(line, " ON ") + 4)
    sub(/\..*/, "", schema)
    emit("INDEX", schema "." name, name)
  } else if (match(line, /^CREATE (TABLE|VIEW|MATERIALIZED VIEW|SEQUENCE|TYPE) [a-z0-9_]+\.[a-z0-9_]+/)) {
    object = substr(line, 1, RLENGTH)
    kind = object
    sub(/^CREATE /, "", kind)
    sub(/ [a-z0-9_]+\.[a-z0-9_]+$/, "", kind)
    sub(/^CREATE [A-Z ]+ /, "", object)
    emit(kind, object, unqualified_name(object))
  } else if (match(line, /^CREATE TRIGGER [a-z0-9_]+ .* ON [a-z0-9_]+\.[a-z0-9_]+/)) {
    # A trigger is named on its table.
    split(line, w, / +/)
    table = substr(line, index(line, " ON ") + 4)
    sub(/ .*/, "", table)
    emit("TRIGGER", w[3] " ON " table, w[3])
  } else if (match(line, /^CREATE SCHEMA [a-z0-9_]+/)) {
    object = substr(line, 15, RLENGTH - 14)
    emit("SCHEMA", object, object)
  } else {
    die("a CREATE this script does not know how to comment: " line)
  }
  reset_header()
  next
}
{ reset_header() }

END { if (!failed && collecting) { FNR = "end"; die("unterminated argument list of " fn_name) } }
