"""Who holds and who takes a place in a study (the quota): :class:`ParticipantQuerySet`, the manager's queryset
of :class:`studies.models.Participant` (kept out of studies/models.py, which stays under 800 lines)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.db import models

from infra import clock

if TYPE_CHECKING:
    from studies.models import Participant, Study  # noqa: F401 (in the QuerySet["Participant"] base)

# A place is reserved when a worker's first session opens, and held once they have sent a message; a
# reservation nobody writes in gives its place back after this long (docs/worker-quality.md, "Timing").
PLACE_RESERVED_MINUTES = 10


class ParticipantQuerySet(models.QuerySet["Participant"]):
    def holding_a_place(self) -> ParticipantQuerySet:
        """Participants who have not given up their participation: not declined, not abandoned."""
        return self.filter(declined_at__isnull=True, abandoned_at__isnull=True)

    def taking_a_place(self, study: Study, now: dt.datetime | None = None) -> ParticipantQuerySet:
        """Participants who count against ``study``'s quota now. Opening the link, reading the consent page or
        consenting takes no place (invented Prolific IDs cannot fill a study that way). A place is taken by:

        - a participant who finished, or who waits for the study's next wave (``paused_at``, prolific/);
        - one who has written in a session (``first_message_at``) and was seen within the study's
          "abandoned after" minutes: the place is free the moment they pass it, not at the next sweep;
        - one whose first session opened (``started_at``) less than :data:`PLACE_RESERVED_MINUTES` ago and
          who has not written yet (the place is kept for them while they read the instructions)."""
        now = now or clock.now()
        seen = now - dt.timedelta(minutes=int(study.abandon_after_minutes))
        reserved = now - dt.timedelta(minutes=PLACE_RESERVED_MINUTES)
        return self.holding_a_place().filter(
            models.Q(completed_at__isnull=False)
            | models.Q(paused_at__isnull=False)
            | models.Q(first_message_at__isnull=False, last_seen_at__gte=seen)
            | models.Q(first_message_at__isnull=True, started_at__gte=reserved)
        )

    def real(self) -> ParticipantQuerySet:
        """Workers, not a researcher's preview (studies/preview.py)."""
        return self.exclude(source="preview")  # Participant.Source.PREVIEW (this module may not import the models)
