"""The cases of the abuse suite (bench/abuse.py runs them), one per attack of issue 21's outside attack, by
family: the way in (bench/abuse_entry.py), the server (bench/abuse_server.py), the pages
(bench/abuse_pages.py); bench/abuse_common.py has the simulated clients. Each case does what the attacker
did, over HTTP and websockets against the running server, and returns whether the limit held, what was
measured, and the numbers."""

from __future__ import annotations

from abuse import Case
from abuse_common import warm_up
from abuse_entry import flood_many_addresses, flood_one_client, pid_squatting, quota_invented_ids, resume_codes
from abuse_pages import (
    absurd_numbers,
    admin_ownership,
    attention_markup,
    csv_readme,
    power_simulations,
    pseudonyms,
    qc_switch,
    unmeasured_signals,
)
from abuse_server import anonymous_uploads, downloads, login_throttle, slow_clients, socket_replays

__all__ = ["CASES", "warm_up"]

CASES = [
    Case("flood-one-client", "High", "invented Prolific IDs from one client, 8 sockets", flood_one_client),
    Case("flood-many-addresses", "High", "the same flood from a new address per participant", flood_many_addresses),
    Case("quota-invented-ids", "Medium", "3 invented IDs consent on a study with a quota of 3", quota_invented_ids),
    Case("anonymous-uploads", "Medium", "anonymous 50 MB POSTs to the import page", anonymous_uploads),
    Case(
        "login-throttle", "Medium", "rotated X-Forwarded-For; a researcher's address claimed or shared", login_throttle
    ),
    Case("downloads", "Medium", "parallel downloads of a large export", downloads),
    Case("admin-ownership", "Medium", "a shared researcher makes themselves the creator", admin_ownership),
    Case("unmeasured-signals", "Medium", "messages without or with unreadable signals", unmeasured_signals),
    Case("csv-readme", "Low", "formulas and line breaks in the CSV README", csv_readme),
    Case("pseudonyms", "Low", "Prolific IDs in the analysis exports", pseudonyms),
    Case("power-simulations", "Low", "the largest plans, queued without bound, cancelled", power_simulations),
    Case("qc-switch", "Low", "an open study's arm switched to qc", qc_switch),
    Case("attention-markup", "Low", "the attention check found by a script", attention_markup),
    Case("pid-squatting", "Low", "a worker's PID used first by someone else", pid_squatting),
    Case("resume-codes", "Low", "a worker's resume-code attempts used up", resume_codes),
    Case("socket-replays", "Low", "resume requests flooded on the socket", socket_replays),
    Case("slow-clients", "Low", "slow-header and slow-body connections", slow_clients),
    Case("absurd-numbers", "Low", "5,000-digit and ² values in forms", absurd_numbers),
]
