-- Schedules (store.ScheduleStore): the same tables as SQLite's 0007_schedules.sql, in
-- Postgres types. catchup_window is in nanoseconds.
CREATE TABLE schedules (
    namespace      TEXT        NOT NULL,
    name           TEXT        NOT NULL,
    workflow       TEXT        NOT NULL,
    queue          TEXT        NOT NULL,
    input          BYTEA,
    cron           TEXT        NOT NULL,
    time_zone      TEXT        NOT NULL,
    overlap        TEXT        NOT NULL,
    catchup_window BIGINT      NOT NULL,
    paused         BOOLEAN     NOT NULL DEFAULT false,
    last_fire_at   TIMESTAMPTZ NOT NULL,
    last_run_id    TEXT        NOT NULL DEFAULT '',
    buffered_at    TIMESTAMPTZ,
    created_at     TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- The scheduler lease: one row (see SQLite's).
CREATE TABLE scheduler_lease (
    id         INTEGER     NOT NULL PRIMARY KEY CHECK (id = 1),
    owner      TEXT        NOT NULL,
    epoch      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
