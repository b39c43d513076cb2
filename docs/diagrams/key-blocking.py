#!/usr/bin/env python3
"""A key held up by its failing head while the lane's other keys go on (docs/concepts.md
#ordering): one lane of one handler, its deliveries in commit order, before and after the
head is dead-lettered. Prints the SVG."""
from svg import BLUE, GREEN, GREY, RED, Drawing

W, H = 900, 420
BOX, GAP, LEFT = 78, 10, 60

STYLE = {  # state: fill, stroke, legend
    "finished": ("#eeeeee", GREY, "finished"),
    "flight": ("#dce8fb", BLUE, "in flight"),
    "retry": ("#fdecea", RED, "failed, waiting for its retry"),
    "dead": ("#f4c7c3", RED, "dead letter"),
    "blocked": ("#fff4d6", "#b07d00", "held: an earlier one of its key is pending"),
    "next": ("#e8f5e9", GREEN, "claimable now"),
}

# (position, key, state, note) for each row.
BEFORE = [(1, "k1", "finished", ""), (2, "-", "finished", ""), (3, "k1", "retry", "attempt 2\nfailed"),
          (4, "k2", "flight", ""), (5, "k1", "blocked", ""), (6, "-", "flight", ""),
          (7, "k2", "blocked", ""), (8, "k1", "blocked", ""), (9, "-", "next", "")]
AFTER = [(1, "k1", "finished", ""), (2, "-", "finished", ""), (3, "k1", "dead", "attempt 25\nfailed"),
         (4, "k2", "finished", ""), (5, "k1", "next", ""), (6, "-", "finished", ""),
         (7, "k2", "next", ""), (8, "k1", "blocked", ""), (9, "-", "finished", "")]

d = Drawing(W, H, "A key held up by its failing head while other keys go on")


def lane(y, title, cells):
    d.text(LEFT, y - 12, title, size=12, weight="bold", color=BLUE)
    for i, (position, key, state, note) in enumerate(cells):
        x = LEFT + i * (BOX + GAP)
        fill, stroke, _ = STYLE[state]
        d.rect(x, y, BOX, 48, fill=fill, stroke=stroke, dash="4 3" if state == "blocked" else None)
        d.text(x + BOX / 2, y + 20, f"#{position}", size=11, anchor="middle", color="#555555")
        d.text(x + BOX / 2, y + 38, "unkeyed" if key == "-" else f"key {key}", size=12, anchor="middle",
               weight="bold")
        if note:
            d.text(x + BOX / 2, y + 64, note, size=10, anchor="middle", color=stroke)


d.text(LEFT, 24, "One lane of handler mailer, deliveries in the order their publishes committed",
       size=13, weight="bold")
lane(70, "While #3 (key k1) fails and waits for its retry", BEFORE)
d.text(LEFT, 170, "k1's later deliveries (#5, #8) wait behind #3; k2 waits only for its own #4 in flight;"
       " unkeyed #9 goes.", size=11, color="#444444")
lane(230, "Once #3 is a dead letter (its 25th attempt failed, with the defaults)", AFTER)
d.text(LEFT, 330, "A dead letter holds nothing up: #5 runs next, then #8. A requeued #3 keeps its place:"
       " it holds up k1's deliveries still pending.", size=11, color="#444444")
for i, state in enumerate(["finished", "flight", "retry", "next", "blocked", "dead"]):
    fill, stroke, label = STYLE[state]
    x = LEFT + (i % 3) * 270
    y = 360 + (i // 3) * 26
    d.rect(x, y, 18, 14, fill=fill, stroke=stroke, rx=2, dash="4 3" if state == "blocked" else None)
    d.text(x + 26, y + 12, label, size=11)
print(d.svg(), end="")
