#!/usr/bin/env python3
"""The way to the dead letters with subscribe's defaults (docs/worker-guide.md#how-long-
until-a-failing-delivery-is-dead): the wait after each failed attempt and the time since
the first, until the last attempt fails. The defaults and the rule are read from core
(src/core/retry_policy.hpp: kDefault*, backoff_us), so the picture follows them. Prints
the SVG."""
import math
import os
import re

from svg import BLUE, RED, Drawing

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "core", "retry_policy.hpp")


def default(name):
    text = open(HEADER).read()
    m = re.search(rf"{name}\s*=\s*([0-9']+)", text)
    if not m:
        raise SystemExit(f"{HEADER}: no {name}")
    return int(m.group(1).replace("'", ""))


MAX_ATTEMPTS = default("kDefaultMaxAttempts")
BASE_S = default("kDefaultBackoffBaseUs") / 1e6
CAP_S = default("kDefaultBackoffMaxUs") / 1e6


def backoff_s(failed):
    """core::backoff_us: base * 2^(n-1) after n failed attempts, capped."""
    return min(BASE_S * 2 ** (failed - 1), CAP_S)


def human(s):
    if s < 60:
        return f"{s:g} s"
    if s < 3600:
        return f"{s / 60:.0f} min" if s % 60 == 0 or s >= 600 else f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h" if s % 3600 else f"{s / 3600:.0f} h"


waits = [backoff_s(n) for n in range(1, MAX_ATTEMPTS)]  # after attempts 1 .. max-1
elapsed = [sum(waits[:n]) for n in range(MAX_ATTEMPTS)]  # when attempt n+1 starts

W, H = 900, 430
X0, Y0, PW, PH = 80, 60, 760, 280  # plot area
d = Drawing(W, H, "The way to the dead letters with subscribe's defaults")
d.text(X0, 24, f"A delivery that fails every time, with subscribe's defaults (max_attempts {MAX_ATTEMPTS}, "
       f"backoff_base {human(BASE_S)}, backoff_max {human(CAP_S)})", size=13, weight="bold")
d.text(X0, 44, "bars: the wait after each failed attempt (log scale, left); line: hours since the first "
       "attempt (right)", size=11, color="#444444")

top = math.log10(CAP_S * 2)
bottom = math.log10(BASE_S / 2)


def y_wait(s):
    return Y0 + PH - (math.log10(s) - bottom) / (top - bottom) * PH


total_h = elapsed[-1] / 3600
h_top = math.ceil(total_h / 2) * 2


def y_hours(h):
    return Y0 + PH - h / h_top * PH


step = PW / MAX_ATTEMPTS
d.line(X0, Y0 + PH, X0 + PW, Y0 + PH)
d.line(X0, Y0, X0, Y0 + PH)
d.line(X0 + PW, Y0, X0 + PW, Y0 + PH)
for s in (1, 10, 60, 600, 3600):
    if BASE_S / 2 <= s <= CAP_S * 2:
        d.line(X0 - 4, y_wait(s), X0 + PW, y_wait(s), color="#dddddd")
        d.text(X0 - 8, y_wait(s) + 4, human(s), size=10, anchor="end")
for h in range(0, h_top + 1, 2):
    d.text(X0 + PW + 8, y_hours(h) + 4, f"{h} h", size=10, color=RED)
for n, s in enumerate(waits, start=1):
    x = X0 + (n - 0.5) * step
    d.rect(x - step * 0.35, y_wait(s), step * 0.7, Y0 + PH - y_wait(s), fill="#dce8fb", stroke=BLUE, rx=1)
for n in range(1, MAX_ATTEMPTS + 1):
    if n == 1 or n % 4 == 0 or n == MAX_ATTEMPTS:
        d.text(X0 + (n - 0.5) * step, Y0 + PH + 16, str(n), size=10, anchor="middle")
d.text(X0 + PW / 2, Y0 + PH + 34, "attempt", size=11, anchor="middle")
d.polyline([(X0 + (n + 0.5) * step, y_hours(t / 3600)) for n, t in enumerate(elapsed)], color=RED)
last_x = X0 + (MAX_ATTEMPTS - 0.5) * step
d.text(last_x - 6, y_hours(total_h) - 8, f"attempt {MAX_ATTEMPTS} starts {human(elapsed[-1])} after the first;"
       " when it fails, the delivery is dead", size=11, anchor="end", color=RED)
d.text(X0, H - 20, f"Waits double from {human(BASE_S)} until they reach backoff_max after attempt "
       f"{next(n for n in range(1, MAX_ATTEMPTS) if backoff_s(n) >= CAP_S)}; a takeover (a worker crash) "
       "charges an attempt with no backoff, once its lease has expired.", size=11, color="#444444")
print(d.svg(), end="")
