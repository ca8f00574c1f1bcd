"""``python -m memory arms`` and ``python -m memory replay`` with the scripted backend."""

from __future__ import annotations

import io
import json
import runpy
import sys
from pathlib import Path

import pytest

from memory.__main__ import load, main
from memory.registry import MEMORY_SYSTEMS

GVD = Path(__file__).resolve().parents[1] / "data" / "gvd" / "memory_bank_en.json"  # the repository's copy (MIT)


def run(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), out) == 0
    return out.getvalue()


def test_arms_lists_every_registered_arm_with_its_parameters() -> None:
    text = run("arms")
    for name, cls in MEMORY_SYSTEMS.items():
        assert f"{name}  ({cls.label})" in text
        for pname in cls.params:
            assert f"    {pname} = " in text
    assert json.loads(run("arms", "--json"))["ld_agent"]["params"]["beta"]["default"] == 3600


def test_the_module_runs_as_a_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(sys.modules, "memory.__main__", raising=False)  # run it fresh, as python -m does
    monkeypatch.setattr(sys, "argv", ["memory", "arms"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("memory", run_name="__main__")  # what `python -m memory arms` runs, in this process
    assert done.value.code == 0
    assert "memory_update  (Memory update)" in capsys.readouterr().out


def write_jsonl(path: Path) -> Path:
    lines = [
        {
            "dialogue": "d1",
            "date": "2026-03-01T18:00:00",
            "turns": [{"speaker": "user", "text": "I have a dog named Rex."}, {"speaker": "bot", "text": "Nice!"}],
        },
        {"dialogue": "d1", "date": "2026-03-08", "turns": [{"speaker": "user", "text": "Rex likes carrots."}]},
        {"dialogue": "d1", "probe": "What is my dog's name?"},
        {"dialogue": "d2", "date": "2026-03-01", "turns": [{"speaker": "user", "text": "Hello"}]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_the_jsonl_format_has_sessions_and_probes_per_dialogue(tmp_path: Path) -> None:
    d1, d2 = load(write_jsonl(tmp_path / "dialogues.jsonl"))
    assert d1.name == "d1" and len(d1.sessions) == 2 and [q for _, q in d1.probes] == ["What is my dog's name?"]
    assert d1.sessions[1][0].isoformat() == "2026-03-08T18:00:00+00:00"
    assert d2.sessions[0][1] == [{"speaker": "user", "text": "Hello"}]


def test_replay_of_jsonl_writes_the_memory_after_each_session_and_the_probe_replies(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    run(
        "replay",
        str(write_jsonl(tmp_path / "d.jsonl")),
        "--arm",
        "bm25",
        "--backend",
        "scripted",
        "--embedder",
        "hashing",
        "--out",
        str(out),
    )
    records = [json.loads(x) for x in out.read_text().splitlines()]
    sessions = [r for r in records if "session" in r and r["dialogue"] == "d1"]
    assert [len(r["state"]["utterances"]) for r in sessions] == [2, 4]
    # the user turn without a recorded reply got a generated one (the scripted backend echoes)
    assert sessions[1]["state"]["utterances"][-1]["text"].startswith("You said:")
    (probe,) = [r for r in records if "probe" in r]
    assert probe["memory"] and "Rex" in " ".join(probe["memory"]) and probe["reply"]


def test_replay_of_the_memorybank_set_prints_memory_and_probe_replies() -> None:
    text = run(
        "replay",
        str(GVD),
        "--arm",
        "memory_accumulate",
        "--backend",
        "scripted",
        "--embedder",
        "hashing",
        "--dialogue",
        "Emily",
        "--max-sessions",
        "2",
        "--param",
        "k=2",
    )
    assert text.count("=== Emily session") == 2
    assert text.count("--- Emily probe:") == 7
    assert "what was it?" in text


def test_replay_rejects_an_unknown_dialogue(tmp_path: Path) -> None:
    out = io.StringIO()
    assert (
        main(
            [
                "replay",
                str(write_jsonl(tmp_path / "d.jsonl")),
                "--arm",
                "none",
                "--backend",
                "scripted",
                "--embedder",
                "hashing",
                "--dialogue",
                "nope",
            ],
            out,
        )
        == 2
    )


def test_replay_talks_to_an_openai_compatible_endpoint(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "model": body["model"]})
            reply = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Updated memory: The user has a dog named Rex."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "out.jsonl"
        run(
            "replay",
            str(write_jsonl(tmp_path / "d.jsonl")),
            "--arm",
            "rsum",
            "--backend",
            "openai",
            "--model",
            "tiny",
            "--base-url",
            f"http://127.0.0.1:{server.server_port}/v1",
            "--api-key",
            "k",
            "--embedder",
            "hashing",
            "--dialogue",
            "d1",
            "--out",
            str(out),
        )
    finally:
        server.shutdown()
        server.server_close()
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert records[0]["state"]["memory"] == "The user has a dog named Rex."
    assert (
        {s["path"] for s in seen} == {"/v1/chat/completions"}
        and seen[0]["auth"] == "Bearer k"
        and seen[0]["model"] == "tiny"
    )
    assert records[-1]["reply"] == "Updated memory: The user has a dog named Rex."


def test_arms_lists_every_arm_with_its_label_and_source() -> None:
    import io

    from memory.__main__ import main
    from memory.registry import MEMORY_SYSTEMS

    out = io.StringIO()
    assert main(["arms"], out) == 0
    text = out.getvalue()
    for name, cls in MEMORY_SYSTEMS.items():
        assert f"{name}  ({cls.label})" in text and f"source: {cls.source}" in text
    assert "qc  (Quality control (degraded, no LLM))  [quality control]" in text
