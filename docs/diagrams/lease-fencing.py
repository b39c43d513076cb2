#!/usr/bin/env python3
"""Leases, takeover and fencing, as a sequence (docs/concepts.md#epochs-and-fencing):
worker A stalls past its lease, worker B's claim takes the lane over (an attempt charged,
the epoch moved), and A's late complete changes nothing. Prints the SVG."""
from svg import BLUE, GREEN, GREY, RED, Drawing

W, H = 900, 630
ACTORS = {"A": 150, "relaybus": 450, "B": 750}
TOP = 70

d = Drawing(W, H, "Leases, takeover and fencing")
for name, x in ACTORS.items():
    label = {"A": "worker A", "relaybus": "relaybus: lane 17 of handler mailer", "B": "worker B"}[name]
    d.rect(x - 130 if name == "relaybus" else x - 60, 20, 260 if name == "relaybus" else 120, 30)
    d.text(x, 40, label, anchor="middle", weight="bold", color=BLUE)
    d.line(x, 50, x, H - 40, color=GREY, dash="4 4")


def message(y, frm, to, label, color="#222222"):
    x1, x2 = ACTORS[frm], ACTORS[to]
    step = 6 if x2 > x1 else -6
    d.line(x1, y, x2 - step, y, color=color, width=1.3, arrow=True)
    d.text((x1 + x2) / 2, y - 7, label, size=11, anchor="middle", color=color)


def note(y, at, label, color="#555555", width=250, lines=2):
    x = ACTORS[at]
    d.rect(x - width / 2, y, width, 16 * lines + 6, fill="#fffbe6", stroke="#c8a600", rx=2)
    d.text(x, y + 15, label, size=11, anchor="middle", color=color, italic=True)


y = TOP + 30
message(y, "A", "relaybus", "claim('a', lease => '30 s')")
note(y + 10, "relaybus", "leases lane 17 to A, epoch 5, until 45 s from now\n(1.5 x the 30 s lease); d handed out, attempts = 0", width=290)
y += 70
message(y, "relaybus", "A", "d with token t (epoch 5)")
y += 30
note(y, "A", "the handler runs ... and stalls\n(a long pause, a lost network)")
y += 60
note(y, "relaybus", "45 s pass: the lease has expired, but the\nlane is still A's and t still works")
y += 65
message(y, "B", "relaybus", "claim('b', ...)")
note(y + 10, "relaybus", "takes lane 17 over: epoch 6,\nd charged one attempt, due at once", width=260)
y += 70
message(y, "relaybus", "B", "d again, attempts = 1, token t' (epoch 6)")
y += 45
message(y, "A", "relaybus", "complete(t)", color=RED)
note(y + 10, "relaybus", "epoch 5 is not the lane's: nothing written", width=270, lines=1)
y += 60
message(y, "relaybus", "A", "false: roll the handler's transaction back", color=RED)
y += 45
message(y, "B", "relaybus", "complete(t')", color=GREEN)
y += 35
message(y, "relaybus", "B", "true: d is completed, once", color=GREEN)
d.text(W / 2, H - 4, "Without worker B, the maintenance background worker takes the lane over and frees it "
       "(take_over_expired, every relaybus.maintenance_interval: 1 s by default).", size=10, anchor="middle",
       color="#555555")
print(d.svg(), end="")
