#!/usr/bin/env python3
"""The last part of a budget with the real agent CLIs: `target/venv/bin/python bench/last_part.py` (about 5 minutes;
needs what scripts/test.sh installs: target/venv, target/agents, a debug build).

Starts the fake LLM billing as providers do (tests/python/fake_llm.py --metered: input by size, counted alike by
`count_tokens` and `responses/input_tokens`, 300 output tokens within the cap) and the real gateway passing
Messages and Responses through to it at real models' prices (tests/python/conftest.py METERED_CONFIG). For each
CLI (Claude Code `-p`, Codex `exec`), per round: one run with an unbudgeted key gives the mean cost of a call;
a fresh key gets a budget of 20 such calls; the CLI is run again and again until a run is refused; the figure is
the key's recorded spend when refused ÷ its budget. BENCH_ROUNDS (default 2) rounds; prints one line per round
and the median."""

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
import conftest  # noqa: E402
import test_agent_clis as clis  # noqa: E402


def spend(gateway, alias):
    rows = [r for r in conftest.admin_get(gateway, "/spend/logs?limit=1000")["data"] if r["key_alias"] == alias]
    return sum(r["spend_nanos"] for r in rows), len(rows)


def settled(gateway, alias):
    """The key's spend once no new record has come for half a second."""
    last, deadline = None, time.time() + 10
    while time.time() < deadline:
        now = spend(gateway, alias)
        if now == last:
            return now
        last = now
        time.sleep(0.5)
    return last


def run(cli, gateway, key, cwd):
    if cli == "claude":
        code, out, err = clis.claude(gateway, key, "say hi", "claude-sonnet-5-5", cwd)
        refused = "Budget exceeded" in out + err
    else:
        code, out, err = clis.codex(gateway, key, "say hi", "gpt-5-codex", cwd)
        refused = "Quota exceeded" in out + err
    return code, refused, out + err


def one_round(cli, gateway, n):
    cwd = clis.workdir()
    probe = f"{cli}-probe-{n}"
    code, refused, text = run(cli, gateway, conftest.new_key(gateway, {"team_id": "agents", "key_alias": probe}), cwd)
    assert code == 0 and not refused, text
    cost, calls = settled(gateway, probe)
    limit = 20 * cost // calls
    alias = f"{cli}-budget-{n}"
    key = conftest.new_key(gateway, {"team_id": "agents", "key_alias": alias, "max_budget": limit / 1e9})
    for runs in range(1, 100):
        code, refused, text = run(cli, gateway, key, cwd)
        if refused:
            break
        assert code == 0, text
    spent, records = settled(gateway, alias)
    assert spent <= limit, (spent, limit)
    print(f"{cli:7} round {n}: a call costs {cost / calls / 1e9:.6f}; budget {limit / 1e9:.6f} (20 calls); "
          f"{records} calls in {runs - 1} runs before the first refusal; spent {spent / 1e9:.6f} = "
          f"{100 * spent / limit:.2f} %", flush=True)
    return spent / limit


def main():
    rounds = int(os.environ.get("BENCH_ROUNDS", "2"))
    fake = conftest._spawn([sys.executable, os.path.join(HERE, "..", "tests", "python", "fake_llm.py"), "--metered"],
                           r"listening on (http://\S+)")
    svc, gateway = conftest.serve(conftest.METERED_CONFIG, "svc-last-part-", fake=fake[1].group(1))
    try:
        for cli in ("claude", "codex"):
            figures = [one_round(cli, gateway, n) for n in range(1, rounds + 1)]
            print(f"{cli:7} median {100 * statistics.median(figures):.2f} % (spread "
                  f"{100 * min(figures):.2f}–{100 * max(figures):.2f} %, {rounds} rounds)", flush=True)
    finally:
        conftest._stop(svc)
        conftest._stop(fake[0])


if __name__ == "__main__":
    main()
