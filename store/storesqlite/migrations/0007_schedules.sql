-- Schedules (store.ScheduleStore): a workflow started on a cron expression in a time
-- zone. last_fire_at is the scheduler's cursor (ticks up to it are handled);
-- buffered_at the tick kept by the buffer_one overlap policy. catchup_window is in
-- nanoseconds; times are unix nanoseconds.
CREATE TABLE schedules (
    namespace      TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    workflow       TEXT    NOT NULL,
    queue          TEXT    NOT NULL,
    input          BLOB,
    cron           TEXT    NOT NULL,
    time_zone      TEXT    NOT NULL,
    overlap        TEXT    NOT NULL,
    catchup_window INTEGER NOT NULL,
    paused         BOOLEAN NOT NULL DEFAULT false,
    last_fire_at   INTEGER NOT NULL,
    last_run_id    TEXT    NOT NULL DEFAULT '',
    buffered_at    INTEGER,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (namespace, name)
) WITHOUT ROWID;

-- The scheduler lease: one row. epoch grows by one at every change of hands; every
-- scheduled run is written checking it (store.ScheduleFire).
CREATE TABLE scheduler_lease (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    owner      TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
