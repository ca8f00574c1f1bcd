"""How the prompt-leak detector (memory.hygiene.find_prompt_leak) separates ordinary replies from
replies that recite the prompt, for every registered arm's reply prompt and its opener prompt.

    .venv/bin/python bench/bench_prompt_leaks.py [--gvd memory/data/gvd/memory_bank_en.json]

Ordinary replies: the 566 recorded bot replies of the MemoryBank evaluation set (ChatGPT as an AI
companion; they share many words with a companion's prompt but were not written from ours). Each is
checked against each arm's prompt built over the scripted 5-session dialogue of the contract test,
with the arm's memory in it. For each arm the table gives the longest run of consecutive words any
ordinary reply shares with the prompt's instructions, and how many replies reach 5, 6 and 7 words.

Recitals: every sentence of the prompt's instructions (what a model that "quotes what is written
above" would say), each as a reply of its own; the table gives the share caught at the threshold.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory.base import Turn  # noqa: E402
from memory.embed import HashingEmbedder  # noqa: E402
from memory.hygiene import (  # noqa: E402
    LEAK_MIN_WORDS,
    _longest_run,
    find_prompt_leak,
    instruction_texts,
    words,
)
from memory.registry import MEMORY_SYSTEMS, build_system  # noqa: E402
from memory.systems.common import split_sentences  # noqa: E402
from memory.tests.dialogue import START, run_dialogue  # noqa: E402
from memory.tests.fake_llm import fake_llm  # noqa: E402

# the repository's copy (MIT)
DEFAULT_GVD = Path(__file__).resolve().parents[1] / "memory" / "data" / "gvd" / "memory_bank_en.json"


def replies(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [p["response"] for user in data.values() for day in user["history"].values() for p in day]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--gvd",
        default=str(DEFAULT_GVD),
    )
    args = parser.parse_args()
    ordinary = replies(Path(args.gvd))
    print(f"{len(ordinary)} ordinary replies; threshold LEAK_MIN_WORDS = {LEAK_MIN_WORDS}\n")
    print("| arm | prompt | longest shared run (ordinary) | ≥5 | ≥6 | ≥7 | recited sentences caught |")
    print("|---|---|---|---|---|---|---|")
    worst = 0
    for name in MEMORY_SYSTEMS:
        llm = fake_llm()
        system = build_system(name, llm=llm, embedder=HashingEmbedder())
        state = run_dialogue(system, llm).states[-1]
        question = [Turn("user", "Do you remember my dog Rex?", START)]
        prompts = {
            "reply": (system.compose(state, question, START), [t.text for t in question]),
            "opener": (system.compose_opening(state, START), []),
        }
        for kind, (prompt, chat) in prompts.items():
            instructions = [w for _, text in instruction_texts(prompt.messages, chat) for w in [words(text)]]
            runs = []
            for reply in ordinary:
                rw = words(reply)
                runs.append(max((_longest_run(rw, src, 1)[1] for src in instructions), default=0))
            texts = [text for _, text in instruction_texts(prompt.messages, chat)]
            sentences = [s for text in texts for s in split_sentences(text) if words(s)]
            recitals = [s for s in sentences if len(words(s)) >= LEAK_MIN_WORDS]
            short = len(sentences) - len(recitals)
            caught = sum(find_prompt_leak(s, prompt.messages, chat=chat) is not None for s in recitals)
            worst = max(worst, max(runs))
            print(
                f"| {name} | {kind} | {max(runs)} | {sum(r >= 5 for r in runs)} | {sum(r >= 6 for r in runs)} | "
                f"{sum(r >= 7 for r in runs)} | {caught}/{len(recitals)} (+{short} shorter) |"
            )
    print(f"\nlongest run shared by an ordinary reply with any prompt: {worst} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
