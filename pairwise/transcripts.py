"""What a judge reads of an episode (its sessions, session by session), and the two style covariates of the
pairwise analysis: how much the bot said, and how often it called back to something the worker said in an
earlier session."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from chat.models import ChatSession, Episode, Message

_WORD = re.compile(r"[a-z][a-z']{3,}")
# Words too common to show that the bot remembered anything (function words and chat filler of 4+ letters).
_STOP_TEXT = """about above after again against also always another anything around back been before being below between
    both came come could didn't does doesn't doing done down during each even ever every from further going gonna
    good great have having here hers herself himself hope how's into it's itself just know last like little long
    look made make many maybe more most much must myself never nice next nothing once only other ought ours
    ourselves over own really right said same says should since some something still such sure take tell than
    thank thanks that that's their theirs them themselves then there there's these they they'd they'll they're
    they've thing things think this those though through time today together told tomorrow very want wants wanted
    week well we're were what what's when when's where where's which while who's whom whose will with would
    yeah year years yesterday you'd you'll your you're yours yourself yourselves you've okay glad sounds sound
    lovely doing feel feeling hello again great awesome"""
STOPWORDS = frozenset(_STOP_TEXT.split())


@dataclass
class SessionText:
    index: int
    gap_label: str
    messages: list[tuple[str, str]] = field(default_factory=list)  # (speaker, text)


def sessions_of(episodes: Iterable[Episode]) -> dict[int, list[SessionText]]:
    """The finished sessions of each episode with their complete messages, in order (two queries)."""
    ids = [e.pk for e in episodes]
    out: dict[int, list[SessionText]] = defaultdict(list)
    by_session: dict[int, SessionText] = {}
    for s in (
        ChatSession.objects.filter(episode_id__in=ids)
        .select_related("episode__participant__study")
        .order_by("episode_id", "index")
    ):
        text = SessionText(s.index, s.gap_label if s.index > 1 else "")
        out[s.episode_id].append(text)
        by_session[s.pk] = text
    for session_id, speaker, body in (
        Message.objects.filter(session_id__in=by_session, status=Message.Status.COMPLETE)
        .order_by("session_id", "seq")
        .values_list("session_id", "speaker", "text")
    ):
        by_session[session_id].messages.append((speaker, body))
    return out


def side_by_side(
    left: Sequence[SessionText], right: Sequence[SessionText]
) -> list[tuple[SessionText | None, SessionText | None]]:
    """The two episodes' sessions aligned by index: session 1 beside session 1, and so on."""
    n = max(len(left), len(right))
    return [(left[k] if k < len(left) else None, right[k] if k < len(right) else None) for k in range(n)]


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in STOPWORDS}


def bot_length(sessions: Sequence[SessionText]) -> int:
    """Characters the bot wrote over the episode."""
    return sum(len(text) for s in sessions for speaker, text in s.messages if speaker == Message.Speaker.BOT)


def callbacks(sessions: Sequence[SessionText]) -> int:
    """Bot messages that bring back something the worker said in an earlier session: from the second session on,
    a bot message using a content word (4+ letters, not a common word) that the worker used in an earlier
    session and that nobody has used yet in this session. A heuristic (it misses paraphrases and counts a word
    that recurs by chance), the same for every arm."""
    earlier: set[str] = set()
    count = 0
    for s in sorted(sessions, key=lambda s: s.index):
        said_here: set[str] = set()
        for speaker, text in s.messages:
            words = _words(text)
            if speaker == Message.Speaker.BOT and s.index > 1 and (words & earlier) - said_here:
                count += 1
            said_here |= words
        earlier |= {w for speaker, text in s.messages if speaker == Message.Speaker.USER for w in _words(text)}
    return count
