"""The per-project index file: its tables, and the versions that decide when it is rebuilt.

One SQLite file per project. ``events`` is the durable, append-only log; every other
table is a projection of it that ``index.rebuild`` can recreate from the log alone.

Tables
------
meta      key/value: schema_version, tokenizer_version, project cwd, applied cursor.
events    the log. ``seq`` orders it; ``kind`` is one of ``ingest.events.EVENT_KINDS``;
          ``payload`` is the event's JSON. ``source_id`` (unique when present) makes
          re-delivered events (the same Redis stream id, say) harmless.
sessions  one row per Pi session: file, cwd, version, header time, last entry (the leaf),
          and ``epoch``, bumped by each reset (a branch computed before it is stale).
entries   one row per tree entry, keyed by (session_id, entry_id); its rowid is never
          reused (readers memoize per rowid). ``text`` is the
          searchable text (never thinking, images or ``custom`` data); ``text_hash``
          identifies equal texts up to case and whitespace (deduplication). ``eligible`` is 1
          for the entries automatic retrieval may return (``message`` and
          ``custom_message`` with text). ``first_kept_id`` is set on compactions
          that keep a contiguous run of entries (Pi, Claude Code), and on Pi 1.x
          ``context_edit`` entries to the entry they take out of context
          (``targetId``); ``kept_ids`` (a JSON array) on compactions that keep a set
          of earlier entries by id (Codex's ``replacement_history``), NULL elsewhere.
entries_fts  FTS5 over ``entries.text`` (external content; rowid = entries.rowid), its
          words Porter-stemmed (``FTS_TOKENIZE``).
files     what ingest has read of each session file (``ingest.reader.FileState`` as
          JSON: size, offset, hash of the last complete line), so a re-run reads
          only new lines.
embeddings  opt-in semantic vectors (``index.embeddings``): one row per chunk of an
          eligible entry, keyed by (session_id, entry_id, chunk) and stamped with the
          entry's ``text_hash``, the model name, its dimensions and the chunking
          version; a row whose stamp no longer matches is stale and ignored.
          ``vector`` is little-endian float32. Added with ``IF NOT EXISTS``, so older
          files gain the table on their next write without a rebuild.
tombstones  what ``lookback forget`` forgot (``index.tombstones``), a projection of the
          ``forget`` events: (session id, entry id; '' for the whole session). An entry
          applied later under such a key is stored without its text (a link of the tree).
forgotten_texts  the ``text_hash`` of each forgotten text: the same text applied again
          (a fork's copy, a re-read file) is stored without it too.
"""

from __future__ import annotations

#: Bump when a table changes shape; an older file is then rebuilt from its events.
#: 2: entry rowids are AUTOINCREMENT, never reused after a session reset, so what a
#:    reader memoizes per rowid can never describe another text.
#: 3: ``entries.kept_ids``, the ids a Codex compaction keeps in context (an older file
#:    gains the column on its next write, NULL being right for every entry it holds).
SCHEMA_VERSION = 3

#: Bump when tokenization or searchable-text extraction changes; same consequence.
#: 2: the FTS table stems words (Porter), so a keyword matches its word forms.
TOKENIZER_VERSION = 2

#: Words as the index cuts them: ``_`` is a token character so ``parse_config_v2`` is
#: one token, found whole; case and Latin accents are folded.
WORD_TOKENIZE = "unicode61 remove_diacritics 2 tokenchars '_'"
#: The FTS table's tokenizer: those words, each reduced to its Porter stem (SQLite's own
#: ``porter`` tokenizer), so "reminder" finds "remind" and "writing" finds "writes".
#: Literal terms are still verified as written against the stored text.
FTS_TOKENIZE = f"porter {WORD_TOKENIZE}"

DDL = f"""
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    payload    TEXT NOT NULL,
    source_id  TEXT UNIQUE,
    created_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    session_id     TEXT PRIMARY KEY,
    file           TEXT,
    cwd            TEXT,
    version        INTEGER,
    started_at     TEXT,
    parent_session TEXT,
    leaf_id        TEXT,
    entry_count    INTEGER NOT NULL DEFAULT 0,
    epoch          INTEGER NOT NULL DEFAULT 0,
    updated_at     REAL
);

CREATE TABLE IF NOT EXISTS entries (
    rowid         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    TEXT NOT NULL,
    entry_id      TEXT NOT NULL,
    parent_id     TEXT,
    seq           INTEGER NOT NULL,
    type          TEXT NOT NULL,
    role          TEXT,
    timestamp     TEXT,
    ts_ms         INTEGER,
    text          TEXT NOT NULL DEFAULT '',
    text_hash     TEXT,
    tokens        INTEGER NOT NULL DEFAULT 0,
    eligible      INTEGER NOT NULL DEFAULT 0,
    first_kept_id TEXT,
    kept_ids      TEXT,
    UNIQUE (session_id, entry_id)
);
CREATE INDEX IF NOT EXISTS entries_parent ON entries (session_id, parent_id);

CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    text,
    content='entries',
    content_rowid='rowid',
    tokenize="{FTS_TOKENIZE}"
);

CREATE TABLE IF NOT EXISTS files (
    path       TEXT PRIMARY KEY,
    session_id TEXT,
    state      TEXT,
    updated_at REAL
);

CREATE TABLE IF NOT EXISTS embeddings (
    session_id       TEXT NOT NULL,
    entry_id         TEXT NOT NULL,
    chunk            INTEGER NOT NULL,
    text_hash        TEXT NOT NULL,
    model            TEXT NOT NULL,
    dimensions       INTEGER NOT NULL,
    chunking_version INTEGER NOT NULL,
    vector           BLOB NOT NULL,
    PRIMARY KEY (session_id, entry_id, chunk)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS tombstones (
    session_id TEXT NOT NULL,
    entry_id   TEXT NOT NULL,
    PRIMARY KEY (session_id, entry_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS forgotten_texts (
    text_hash TEXT PRIMARY KEY
) WITHOUT ROWID;
"""
