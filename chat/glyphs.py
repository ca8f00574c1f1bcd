"""Numbers drawn, not written: the digits of a rating statement as an inline SVG whose strokes a person reads and
a script does not (issue 21: an attention check's statement carried its target, "please set this slider to
80", so a script that read the page set it right and passed).

Each digit is drawn from the strokes of a seven-segment figure; every stroke is cut into one to three pieces at
random points, every point is moved a little at random, and all pieces of the number are shuffled, so neither
the SVG's text nor its structure repeats from one page to the next. The SVG is hidden from assistive
technology (a label would give the number away): the one cost, written down in docs/worker-quality.md.
"""

from __future__ import annotations

import random
import re

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# seven segments on a 6 x 10 box: (x0, y0, x1, y1)
_SEGMENTS = {
    "a": (0, 0, 6, 0), "b": (6, 0, 6, 5), "c": (6, 5, 6, 10), "d": (0, 10, 6, 10),
    "e": (0, 5, 0, 10), "f": (0, 0, 0, 5), "g": (0, 5, 6, 5),
}  # fmt: skip
_DIGITS = {"0": "abcdef", "1": "bc", "2": "abged", "3": "abgcd", "4": "fgbc", "5": "afgcd", "6": "afgedc",
           "7": "abc", "8": "abcdefg", "9": "abcdfg"}  # fmt: skip
_ADVANCE = 9.0
_RUN = re.compile(r"[0-9]+")
_rng = random.SystemRandom()


def drawn_number(digits: str) -> SafeString:
    """An inline SVG of ``digits`` (ASCII digits only), drawn anew on every call."""
    pieces: list[str] = []
    for i, digit in enumerate(digits):
        for name in _DIGITS[digit]:
            x0, y0, x1, y1 = _SEGMENTS[name]
            cuts = sorted([0.0, 1.0, *(_rng.uniform(0.2, 0.8) for _ in range(_rng.randint(0, 2)))])
            for a, b in zip(cuts, cuts[1:], strict=False):
                points = [(x0 + (x1 - x0) * t + i * _ADVANCE, y0 + (y1 - y0) * t) for t in (a, b)]
                jittered = [(x + _rng.uniform(-0.35, 0.35), y + _rng.uniform(-0.35, 0.35)) for x, y in points]
                (ax, ay), (bx, by) = jittered if _rng.random() < 0.5 else jittered[::-1]
                pieces.append(f'<path d="M{ax:.2f} {ay:.2f}L{bx:.2f} {by:.2f}"/>')
    _rng.shuffle(pieces)
    width = _ADVANCE * len(digits) - 1
    return mark_safe(  # noqa: S308 (numbers we formatted ourselves)
        f'<svg class="drawn-number" viewBox="-1.5 -1.5 {width + 3:.1f} 13" width="{(width + 3) / 13:.2f}em" '
        f'height="1em" aria-hidden="true" focusable="false"><g fill="none" stroke="currentColor" '
        f'stroke-width="1.5" stroke-linecap="round">{"".join(pieces)}</g></svg>'
    )


def statement_html(text: str) -> SafeString:
    """A statement for the rating page: its text escaped, every run of digits drawn (:func:`drawn_number`)."""
    out, last = [], 0
    for match in _RUN.finditer(text):
        out.append(escape(text[last : match.start()]))
        out.append(drawn_number(match.group()))
        last = match.end()
    out.append(escape(text[last:]))
    return mark_safe("".join(out))  # noqa: S308 (escaped text and our own SVG)
