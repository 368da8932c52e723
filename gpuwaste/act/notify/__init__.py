"""`gpuwaste notify`: per-user and per-VC digests of wasted GPU time, delivered exactly once.

- `digest.py`: the window, who qualifies, the message text (pure, plus one query);
- `recipients.py`: user -> address (template or file), opt-outs, VC owners (pure);
- `ledger.py`: the `notifications` table: what was sent, to whom, for which window;
- `smtp.py`, `webhook.py`: delivery by email (standard library) and chat webhook (apprise);
- `run.py`: plans the messages, prints them (dry run) or sends them under the ledger's rules.
"""
