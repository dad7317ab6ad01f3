"""The SVG badge of a bake-off: ``bake-off | <winner> F1 <macro-F1>`` (flat two-part shield, no external fonts).

Text width is estimated at 6.5 px per character of an 11 px sans-serif font. The winner's name is shown with its
bidirectional controls visible (``<U+202E>``, `zsnli.serving.text.show_bidi`). Imports the standard library and
`zsnli.serving.text`.
"""

from __future__ import annotations

from html import escape

from zsnli.serving.text import show_bidi

CHAR_PX = 6.5
PAD_PX = 10


def badge_svg(label: str, message: str, colour: str = "#2e7d32") -> str:
    """A self-contained SVG (``image/svg+xml``) with ``label`` on grey and ``message`` on ``colour`` (both shown
    with `show_bidi`)."""
    label, message = show_bidi(label), show_bidi(message)
    lw = int(len(label) * CHAR_PX + 2 * PAD_PX)
    mw = int(len(message) * CHAR_PX + 2 * PAD_PX)
    w = lw + mw
    text = escape(f"{label}: {message}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="20" role="img" aria-label="{text}">'
            f"<title>{text}</title>"
            f'<rect width="{lw}" height="20" rx="3" fill="#555"/>'
            f'<rect x="{lw}" width="{mw}" height="20" rx="3" fill="{colour}"/>'
            f'<rect x="{lw}" width="4" height="20" fill="{colour}"/>'
            f'<g fill="#fff" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11" text-anchor="middle">'
            f'<text x="{lw / 2:.1f}" y="14">{escape(label)}</text>'
            f'<text x="{lw + mw / 2:.1f}" y="14">{escape(message)}</text></g></svg>')


def bakeoff_badge(answer: dict) -> str:
    """The badge of a stored answer: the winner and its macro-F1, or ``no winner`` in grey; when some arms did
    not finish (``arms_run``), in amber with ``(F of R arms)``: never a plain winner of a partial run."""
    winner = answer.get("winner")
    entry = next((e for e in answer.get("scorecard", []) if e.get("arm") == winner), None)
    if winner is None or entry is None:
        return badge_svg("bake-off", "no winner", "#9e9e9e")
    run = answer.get("arms_run") or {}
    if run.get("finished", 0) < run.get("requested", 0):
        return badge_svg("bake-off", f"{winner} F1 {entry['macro_f1']:.2f} ({run['finished']} of {run['requested']} "
                                     "arms)", "#ef6c00")
    return badge_svg("bake-off", f"{winner} F1 {entry['macro_f1']:.2f}")
