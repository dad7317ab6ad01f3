"""The batcher's fair queue: one tag per group of jobs (one request), and the virtual time.

Start-time fair queueing (Goyal, Vin and Cheng 1996) over *groups*, with a batch row's padded width as
its cost: the batcher anchors each batch on the group with the smallest tag, and every group that
opened rows in the batch has its tag grown by their padded tokens (`FairQueue.served`).

* **Joining**: a group that joins the line (its first pending item) starts at the virtual time, or at
  the tag it left with when that is later: a group that had nothing pending for a moment (an array's
  next document still being tokenised) keeps what it was served; no credit is banked while away.
* **The virtual time** advances with the work served, as a fluid fair share would: by a batch's padded
  tokens over the groups in line when it was formed, from the anchor's tag when that is ahead. So
  groups that keep joining (a client looping on arrays) start later and later, never ahead of a group
  already in line for ever: every group's tag is eventually the smallest, whatever kinds of work it
  waits for (an embedding item is only ever served as an anchor: issue 39 measured a request whose
  text embedding waited 60 s and more, when the virtual time was the last anchor's tag and did not
  move while fresh groups anchored there).

Bounded: a group out of line is remembered only while its tag is ahead of the virtual time.
May import nothing of zsnli. Used by `zsnli.serving.batching`.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Hashable, Mapping


class FairQueue:
    """Tags (padded tokens, float) of the groups in line and the virtual time (see the module docstring).

    A group is in line while it has pending items (`add` / `remove` count them). Groups are any
    hashable; the batcher uses one object per request.
    """

    def __init__(self) -> None:
        self.vtime = 0.0
        self._tag: dict[Hashable, float] = {}  # groups in line
        self._pending: dict[Hashable, int] = {}
        self._away: dict[Hashable, float] = {}  # out of line, tag ahead of the virtual time
        self._heap: list[tuple[float, int, Hashable]] = []  # (tag, n, group) of `_away`, to drop them in order
        self._n = itertools.count()

    def __len__(self) -> int:
        """Groups in line (with a pending item)."""
        return len(self._tag)

    def __contains__(self, group: Hashable) -> bool:
        return group in self._tag

    def tag(self, group: Hashable) -> float:
        """The tag of a group in line. Raises ``KeyError`` for a group not in line."""
        return self._tag[group]

    def away(self) -> int:
        """Groups out of line still remembered (their tag is ahead of the virtual time)."""
        return len(self._away)

    def add(self, group: Hashable, n: int) -> None:
        """``n`` (> 0) more pending items of ``group``; a group joining the line gets its tag:
        ``max(vtime, the tag it left with)``."""
        if group not in self._tag:
            self._tag[group] = max(self.vtime, self._away.pop(group, self.vtime))
        self._pending[group] = self._pending.get(group, 0) + n

    def remove(self, group: Hashable) -> None:
        """One pending item of ``group`` left the queue (taken into a batch, or dropped); with none left
        the group leaves the line, remembered while its tag is ahead. Raises ``KeyError`` when not in line."""
        self._pending[group] -= 1
        if self._pending[group]:
            return
        del self._pending[group]
        tag = self._tag.pop(group)
        if tag > self.vtime:
            self._away[group] = tag
            heapq.heappush(self._heap, (tag, next(self._n), group))

    def served(self, anchor_tag: float, charges: Mapping[Hashable, float], in_line: int) -> None:
        """A batch was formed: each group in ``charges`` (all in line) pays its padded tokens, and the
        virtual time moves to ``max(vtime, anchor_tag) + sum(charges) / in_line`` (``in_line``: the
        groups in line, of the batch's priority, when it was formed; at least 1)."""
        for group, cost in charges.items():
            self._tag[group] += cost
        self.vtime = max(self.vtime, anchor_tag) + sum(charges.values()) / max(1, in_line)
        while self._heap and self._heap[0][0] <= self.vtime:
            tag, _, group = heapq.heappop(self._heap)
            if self._away.get(group) == tag:
                del self._away[group]
