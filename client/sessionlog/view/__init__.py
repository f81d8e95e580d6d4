"""The session page: a self-contained HTML view of one session (see page.py)."""
