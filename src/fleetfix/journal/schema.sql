-- fleetfix journal schema, version 3 (SQLite's; a team's PostgreSQL journal gets the same
-- tables in its own types from journal/db.py postgres_schema) (older journals get the missing columns on open; their
-- rows read as they always did). One writer per run; WAL lets readers (history, a second
-- controller checking leases) read while a run writes. Facts and output are stored once: a
-- step's registered data in its `steps` row, a command's output (an excerpt, with its full
-- length) in its `commands` row; the events of those two refer to their row (`ref`).
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    playbook    TEXT NOT NULL,
    argv        TEXT NOT NULL,
    check_mode  INTEGER NOT NULL,
    started     REAL NOT NULL,
    finished    REAL,
    outcome     INTEGER,
    hosts       INTEGER NOT NULL,
    controller  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL REFERENCES runs(run_id),
    host      TEXT NOT NULL,
    step      TEXT NOT NULL,
    step_key  TEXT NOT NULL,
    status    TEXT NOT NULL,
    changed   INTEGER NOT NULL,
    message   TEXT NOT NULL,
    attempts  INTEGER NOT NULL,
    duration  REAL NOT NULL,
    -- registered data: JSON (a BLOB of its UTF-8; TEXT in journals before 0.2), zlib-compressed
    -- when longer than 1 KB
    data      TEXT NOT NULL,
    at        REAL NOT NULL,
    -- the command row holding this step's cmd/stdout/stderr (then not repeated in `data`)
    command_id INTEGER
);
CREATE INDEX IF NOT EXISTS steps_run ON steps(run_id, host);
CREATE TABLE IF NOT EXISTS commands (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL,
    host      TEXT NOT NULL,
    step      TEXT NOT NULL,
    command   TEXT NOT NULL,
    rc        INTEGER,
    timed_out INTEGER NOT NULL,
    planned   INTEGER NOT NULL,
    duration  REAL NOT NULL,
    stdout    TEXT NOT NULL,
    stderr    TEXT NOT NULL,
    at        REAL NOT NULL,
    -- the output's full length in characters (stdout/stderr keep an excerpt)
    stdout_size INTEGER,
    stderr_size INTEGER
);
CREATE INDEX IF NOT EXISTS commands_run ON commands(run_id, host);
-- One row per mutating action, written BEFORE its first command is sent (state 'started'),
-- updated after ('ok' / 'failed'; 'undelivered' when a resumed run proved it never happened).
-- max_attempts and cooldowns count every row but undelivered ones.
CREATE TABLE IF NOT EXISTS actions (
    id        INTEGER PRIMARY KEY,
    run_id    TEXT NOT NULL,
    host      TEXT NOT NULL,
    action    TEXT NOT NULL,
    failed    INTEGER NOT NULL,
    at        REAL NOT NULL,
    step_key  TEXT NOT NULL DEFAULT '',
    state     TEXT NOT NULL DEFAULT 'ok',
    evidence  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS actions_host ON actions(host, action, at);
CREATE TABLE IF NOT EXISTS leases (
    host        TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    controller  TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    expires     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL,
    type    TEXT NOT NULL,
    body    TEXT NOT NULL,
    -- CommandRan: its `commands` row; HostStepFinished: its `steps` row (NULL: self-contained)
    ref     INTEGER
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, id);
-- Hosts fleetfix has taken out of service and not yet returned, across runs and controllers:
-- the fleet-wide repair budget counts these rows.
CREATE TABLE IF NOT EXISTS out_of_service (
    host    TEXT PRIMARY KEY,
    run_id  TEXT NOT NULL,
    since   REAL NOT NULL,
    action  TEXT NOT NULL
);
-- What fleetfix learnt about a host that outlives a run (e.g. the most GPUs it ever showed).
CREATE TABLE IF NOT EXISTS host_facts (
    host   TEXT NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    at     REAL NOT NULL,
    PRIMARY KEY (host, key)
);
