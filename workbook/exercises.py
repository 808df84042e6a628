"""What an exercise checker returns: a `Verdict`, truthy when the answer is right, that reads as one line of text
and shows in colour in a notebook. The checkers themselves live with the lessons they check (each package's
`steps.exercises`, `workbook.primer.exercises`), and compute their answers from the code they are about."""
from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str          # what was right, or a hint when it was not (never the answer)

    def __bool__(self) -> bool:
        return self.correct

    def __str__(self) -> str:
        return ("Right. " if self.correct else "Not yet. ") + self.message

    __repr__ = __str__

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.correct else "#9a6700"
        return f"<p style='color:{color}'><b>{'Right.' if self.correct else 'Not yet.'}</b> {html.escape(self.message)}</p>"
