"""Topic nouns for LD-Agent's topic-overlap score (Eq. 1).

LD-Agent's code keeps the lemmas of spaCy ``en_core_web_sm`` tokens tagged NOUN. spaCy and that model
are not dependencies of memeval (the model is not on PyPI from its authors), so the default extractor
is a deterministic heuristic: lower-cased alphabetic words of 3+ letters that are not in a list of
function words, pronouns, frequent verbs, adjectives and adverbs, with a crude plural-to-singular
rule. ``extractor="spacy"`` uses spaCy when it is installed (``pip install spacy`` plus an English
pipeline).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

_STOP = frozenset(
    """
a about above across after afterwards again against ago ah all almost alone along already also although always
am among an and another any anybody anyhow anyone anything anyway anywhere are aren't around as at away back
be became because become becomes been before being below beside besides between beyond both but by can can't
cannot could couldn't did didn't do does doesn't doing don't done down during each either else elsewhere
enough even ever every everybody everyone everything everywhere except few for from further had hadn't has
hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's however i
i'd i'll i'm i've if in indeed instead into is isn't it it's its itself just least less let let's like likely
lot lots may maybe me might mine more moreover most mostly much must mustn't my myself neither never
nevertheless next no nobody none noone nor not nothing now nowhere of off often oh ok okay on once one ones
only onto or other others otherwise ought our ours ourselves out over own per perhaps please quite rather
really same several shall shan't she she'd she'll she's should shouldn't since so some somebody somehow
someone something sometime sometimes somewhat somewhere still such than that that's the their theirs them
themselves then there there's therefore these they they'd they'll they're they've this those though through
throughout thus to together too toward towards under until up upon us very via was wasn't we we'd we'll we're
we've well were weren't what what's whatever when when's whenever where where's whereas wherever whether which
while who who's whoever whole whom whose why why's will with within without won't would wouldn't yeah yes yet
you you'd you'll you're you've your yours yourself yourselves hello hi hey thanks thank sure wow bye goodbye
ask asked asking bring brought buy bought call called came come comes coming could did do feel feeling feels
felt find found get gets getting give given gives go goes going gone got gotten guess had has have hear heard
help helped helps hope hoped keep kept know knew known knows learn learned leave left let like liked likes
live lived lives look looked looking love loved loves made make makes making mean meant meet met mind miss
need needed needs play played plays put read remember said say says see seeing seem seems seen sent show
showed start started stay stayed stop take taken takes taking talk talked talking tell telling tells think
thinking thinks thought told took tried try trying turn use used using want wanted wants was watch watched
went work worked working would wish enjoy enjoyed enjoying recommend recommended love spend spent visit
visited doing sounds sound able bad best better big busy cool different easy fine free full glad good great
happy hard high important interesting large last little long lovely low new nice old real right small sorry
special sure true wonderful amazing awesome beautiful favorite fun funny great kind many much last lately
recently today tomorrow yesterday tonight day days week weeks time times year years actually also always
definitely especially exactly finally just maybe probably pretty quite really recently so still totally truly
very way ways thing things lot bit kinds sort stuff anything everything nothing something today
""".split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[a-z][a-z'-]+")


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def heuristic_nouns(text: str) -> list[str]:
    """Content words as topic nouns (deterministic, no model), deduplicated in order."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower()):
        word = raw.strip("'-")
        if len(word) < 3 or word in _STOP or "'" in word:
            continue
        noun = _singular(word)
        if noun not in out and noun not in _STOP:
            out.append(noun)
    return out


@lru_cache(maxsize=1)
def _spacy() -> Any:
    import spacy

    return spacy.load("en_core_web_sm")


def spacy_nouns(text: str) -> list[str]:
    """LD-Agent's code: lemmas of tokens with ``pos_ == "NOUN"``, deduplicated."""
    out: list[str] = []
    for token in _spacy()(text):
        if token.pos_ == "NOUN" and token.lemma_.lower() not in out:
            out.append(token.lemma_.lower())
    return out


def topic_nouns(text: str, extractor: str = "heuristic") -> list[str]:
    if extractor == "spacy":
        return spacy_nouns(text)
    if extractor == "heuristic":
        return heuristic_nouns(text)
    raise ValueError(f"unknown noun extractor {extractor!r} (heuristic or spacy)")
