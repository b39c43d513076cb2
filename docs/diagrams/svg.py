"""The few SVG shapes the manual's drawn diagrams use (lease-fencing.py, key-blocking.py,
backoff.py): plain SVG 1.1 text, the same bytes at every run, so that
scripts/render-diagrams --check can tell a stale picture from its source."""
from xml.sax.saxutils import escape

FONT = "Helvetica, Arial, sans-serif"
INK = "#222222"
BLUE = "#0b3d91"
GREEN = "#2e7d32"
RED = "#b71c1c"
GREY = "#777777"


def _n(v):
    """A coordinate without float noise."""
    return f"{v:.1f}".rstrip("0").rstrip(".")


class Drawing:
    def __init__(self, width, height, title):
        self.width, self.height = width, height
        self.parts = [f"<title>{escape(title)}</title>",
                      '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                      'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
                      f'fill="{INK}"/></marker></defs>',
                      f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>']

    def text(self, x, y, s, size=12, anchor="start", color=INK, weight="normal", italic=False):
        style = ' font-style="italic"' if italic else ""
        for i, line in enumerate(s.split("\n")):
            self.parts.append(f'<text x="{_n(x)}" y="{_n(y + i * size * 1.25)}" font-family="{FONT}" '
                              f'font-size="{size}" text-anchor="{anchor}" fill="{color}" '
                              f'font-weight="{weight}"{style}>{escape(line)}</text>')

    def line(self, x1, y1, x2, y2, color=INK, width=1, dash=None, arrow=False):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        extra += ' marker-end="url(#arrow)"' if arrow else ""
        self.parts.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
                          f'stroke="{color}" stroke-width="{width}"{extra}/>')

    def rect(self, x, y, w, h, fill="#eef3fb", stroke=BLUE, rx=4, dash=None):
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}" rx="{rx}" '
                          f'fill="{fill}" stroke="{stroke}"{extra}/>')

    def polyline(self, points, color=INK, width=1.5):
        pts = " ".join(f"{_n(x)},{_n(y)}" for x, y in points)
        self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="{width}"/>')

    def svg(self):
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}">\n' + "\n".join(self.parts) + "\n</svg>\n")
